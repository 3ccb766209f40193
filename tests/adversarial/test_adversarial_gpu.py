"""HACKS.md classes that exist only on a GPU: graph replay of PyTorch kernels, host round trips,
TF32 switched on, work left on a side stream; and honest GPU kernels that must pass."""

from pathlib import Path

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from tests.helpers import CUDA_CANDIDATES, PROBLEMS, QUICK_TIMING, TEST_PROBLEMS

pytestmark = pytest.mark.gpu
HERE = Path(__file__).parent / "gpu_candidates"
PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"
CONFIG = EvalConfig(device="cuda", baselines=(), timing_config=QUICK_TIMING)


@pytest.mark.parametrize(("name", "rule"), [
    ("graph_replay", "foreign_kernel"),
    ("host_roundtrip", "host_compute"),
    ("tf32_switched_on", "lower_precision"),
])
def test_gpu_cheat_is_rejected_with_its_rule(name, rule):
    result = evaluate(PROBLEM, HERE / f"{name}.py", CONFIG)
    assert not result.passed and result.reward == -1
    assert rule in {v.rule for v in result.violations}, result.summary()


def test_work_left_on_a_side_stream_is_timed_honestly():
    result = evaluate(PROBLEM, HERE / "side_stream_unsynchronised.py", CONFIG)
    assert result.passed, result.summary()
    stats = result.timing["candidate"]
    assert stats.median_ms >= 0.8 * stats.device_ms  # the device-wide sync counted the kernel


@pytest.mark.parametrize("name", ["honest_own_stream", "honest_triton_views"])
def test_honest_gpu_kernels_pass(name):
    result = evaluate(PROBLEM, HERE / f"{name}.py", CONFIG)
    assert result.passed and not result.violations, result.summary()


def test_honest_cublas_gemm_passes():
    result = evaluate(PROBLEMS / "linear_bias_relu.py", CUDA_CANDIDATES / "linear_bias_relu.py", CONFIG)
    assert result.passed and not result.violations, result.summary()
    assert any("gemm" in kernel.lower() for kernel in result.kernels)
