"""HACKS.md classes that exist only on a GPU: graph replay of PyTorch kernels, host round trips,
TF32 switched on, work on side streams; and honest GPU kernels that must pass."""

from pathlib import Path

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from tests.helpers import CUDA_CANDIDATES, PROBLEMS, QUICK_TIMING, TEST_PROBLEMS, outcomes

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


@pytest.mark.parametrize("name", ["side_stream_unsynchronised", "side_stream_no_wait"])
def test_work_on_a_side_stream_is_timed_with_the_launch_counted(name):
    result = evaluate(PROBLEM, HERE / f"{name}.py", CONFIG)
    assert result.passed, result.summary()
    stats = result.timing["candidate"]
    assert stats.median_ms >= 0.8 * stats.device_ms  # the device-wide sync counted the kernel
    # The side stream could run during the flush, before the start event: no overlapped launch.
    assert stats.launch_overlapped is False


@pytest.mark.parametrize("name", ["honest_own_stream", "honest_triton_views"])
def test_honest_gpu_kernels_pass(name):
    result = evaluate(PROBLEM, HERE / f"{name}.py", CONFIG)
    assert result.passed and not result.violations, result.summary()


def test_a_kernel_on_the_timing_stream_is_timed_with_its_launch_hidden_under_the_flush():
    result = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", CONFIG)
    assert result.passed, result.summary()
    stats = result.timing["candidate"]
    assert stats.launch_overlapped is True
    # Launch hidden: the time is the kernel plus the synchronisation's few microseconds.
    assert stats.median_ms < stats.device_ms + 0.03, (stats.median_ms, stats.device_ms)


def test_honest_cublas_gemm_passes():
    result = evaluate(PROBLEMS / "linear_bias_relu.py", CUDA_CANDIDATES / "linear_bias_relu.py", CONFIG)
    assert result.passed and not result.violations, result.summary()
    assert any("gemm" in kernel.lower() for kernel in result.kernels)


RELU_16MB = TEST_PROBLEMS / "relu_16mb.py"


@pytest.mark.parametrize("name", ["l2_persisting_window", "l2_persisting_other_stream", "l2_persisting_driver_api"])
def test_persisting_l2_left_set_after_forward_is_rejected(name):
    result = evaluate(RELU_16MB, HERE / f"{name}.py", CONFIG)
    assert not result.passed and result.reward == -1
    assert "l2_persistence" in {v.rule for v in result.violations}, result.summary()


@pytest.mark.parametrize("name", ["honest_l2_window", "l2_persisting_init_only"])
def test_persisting_l2_that_cannot_outlive_a_timed_call_passes(name):
    """Set and given back inside forward, or set only at construction (the timer zeroes it before
    every timed call and forward never sets it again): timed honestly, not rejected."""
    result = evaluate(RELU_16MB, HERE / f"{name}.py", CONFIG)
    assert result.passed and not result.violations, result.summary()


# The CPU corpus's cheats whose path differs on the GPU (device copies, the staged timed sets,
# the dispatch audit under CUDA), run there too with the CPU test's expectations.
GPU_RERUN = ["fallback_functional", "fallback_aten_ops", "fallback_try_except", "fallback_after_kernel",
             "timing_call_counting", "timing_call_counting_late", "timing_pointer_memo", "correct_writes_input",
             "correct_scribbles_input_returns_fresh", "correct_returns_input_view", "correct_partial"]


@pytest.mark.parametrize("name", GPU_RERUN)
def test_cpu_corpus_cheat_is_rejected_on_the_gpu_too(name):
    from tests.adversarial.test_adversarial_cpu import EXPECTED

    result = evaluate(PROBLEM, Path(__file__).parent / "candidates" / f"{name}.py", CONFIG)
    assert outcomes(result) & EXPECTED[name], f"{name}: {result.summary()}"
