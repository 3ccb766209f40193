"""The sandbox on the GPU: CUDA stays usable (device nodes, libraries, nvcc and ninja build), builds
stay cached, and an attack is stopped as on the CPU."""

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from tests.adversarial.test_sandbox import ATTACKS
from tests.helpers import CUDA_CANDIDATES, PROBLEMS, QUICK_TIMING

pytestmark = pytest.mark.gpu


def gpu_config(**overrides) -> EvalConfig:
    return EvalConfig(device="cuda", timing_config=QUICK_TIMING, baselines=("eager",), **overrides)

def test_honest_cuda_candidate_passes_sandboxed_and_its_build_stays_cached():
    # Not require_sandbox: on the H100 machine no cgroup is delegated to the evaluator, so as root
    # the process limit is missing and a required sandbox is refused (README, "On the GPU
    # machine"). The layers CUDA has trouble with (Landlock, the PID namespace) are asserted.
    first = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", gpu_config())
    assert first.passed, first.summary() + first.log
    again = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", gpu_config())
    assert again.passed and again.phase_seconds["build"] < 10  # loaded from the build cache, not rebuilt
    for result in (first, again):
        assert result.env["sandbox"]["landlock"] and result.env["sandbox"]["pid_ns"], result.env["sandbox"]

def test_results_file_is_out_of_reach_on_the_gpu(tmp_path, monkeypatch):
    results = tmp_path / "results.jsonl"
    results.write_text("{}\n")
    monkeypatch.setenv("CUDAAGENT_ATTACK_TARGET", str(results))
    result = evaluate(PROBLEMS / "leaky_relu.py", ATTACKS / "write_results_file.py",
                      gpu_config(policy="permissive", timing=False))
    assert result.status == "build_error" and "Permission denied" in result.error
    assert results.read_text() == "{}\n"
