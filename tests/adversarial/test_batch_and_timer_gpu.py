"""The batch and timer attacks of #44 in their GPU forms: outputs in memory that is not the
device's own, the worker's event timing slowed, threads working between timed calls, nested
inputs, the timing lock; and honest GPU code (launch-bound kernels, CUDA graphs, side streams, a
kernel of milliseconds) whose timed calls are all accounted for from outside the worker."""

import time
from pathlib import Path

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.workers import start_ahead
from tests.adversarial.test_batch_and_timer import CANDIDATES, EXPECTED, LEAKY, NESTED
from tests.helpers import CUDA_CANDIDATES, PROBLEMS, QUICK_TIMING, TEST_PROBLEMS, outcomes

pytestmark = pytest.mark.gpu
RELU_16MB = TEST_PROBLEMS / "relu_16mb.py"
COMPAT = Path(__file__).parents[1] / "compat"


def config(**overrides) -> EvalConfig:
    settings = dict(device="cuda", baselines=(), timing_config=QUICK_TIMING, policy="permissive")
    settings.update(overrides)
    return EvalConfig(**settings)


@pytest.mark.parametrize(("name", "problem", "rule"), [
    ("gpu_lazy_managed_memory", LEAKY, "lazy_output"),
    ("gpu_lazy_host_mapped", LEAKY, "lazy_output"),
    ("gpu_clock_events_slowed", RELU_16MB, "timing_unaccounted"),
    # The host's clock slowed: its readings no longer fit this process's, whatever the kernel's size.
    ("clock_gc_slowed", LEAKY, "timing_unaccounted"),
    ("clock_gc_slowed_from_now", LEAKY, "timing_unaccounted"),
    ("threads_native_deferred_work", LEAKY, "background_thread"),
    ("threads_python_at_import_deferred_work", LEAKY, "background_thread"),
    ("threads_ctypes_pthread_deferred_work", LEAKY, "background_thread"),
    ("nested_zeroes_after_answer", NESTED, "input_mutation"),
    ("nested_zeroes_when_unwatched", NESTED, "input_mutation"),
])
def test_gpu_form_is_rejected_with_its_rule(name, problem, rule):
    assert name not in EXPECTED or ("violation", rule) in EXPECTED[name]
    result = evaluate(problem, CANDIDATES / f"{name}.py", config())
    assert not result.passed and result.reward == -1
    assert ("violation", rule) in outcomes(result), f"{name}: {result.summary()}\n{result.log[-1500:]}"


@pytest.mark.parametrize(("problem", "candidate"), [
    (RELU_16MB, CANDIDATES / "gpu_slow_relu_honest.py"),  # milliseconds a call
    (LEAKY, CANDIDATES / "threads_idle_honest.py"),  # idle threads of its own
    (NESTED, CANDIDATES / "nested_honest_triton.py"),  # nested inputs, every timed call checked
    (PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py"),  # one kernel, launch hidden
    (PROBLEMS / "softmax.py", CUDA_CANDIDATES / "softmax.py"),
    (COMPAT / "problems" / "gpu_cuda_graph.py", COMPAT / "candidates" / "gpu_cuda_graph.py"),  # a CUDA graph
    (COMPAT / "problems" / "gpu_streams.py", COMPAT / "candidates" / "gpu_streams.py"),  # two streams
    (LEAKY, Path(__file__).parent / "gpu_candidates" / "honest_own_stream.py"),
])
def test_honest_gpu_code_is_accounted_for_and_passes(problem, candidate):
    result = evaluate(problem, candidate, config())
    assert result.passed and not result.violations, result.summary()
    account = result.timed_request
    assert account and account["unaccounted_ms"] <= account["allowed_ms"], account
    print(candidate.name, result.timing["candidate"], account)  # the numbers, for the GPU run's log


def test_a_candidate_started_ahead_cannot_take_the_gpus_timing_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path / "locks"))
    start_ahead.forget()
    holder = CANDIDATES / "lock_held_from_import.py"
    timed = config(run_timeout_s=120)
    try:
        start_ahead.state().announce(LEAKY, holder, timed)
        assert evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", config(timing=False)).passed
        started = start_ahead.state()._started
        assert started is not None
        deadline = time.monotonic() + 300
        while "timing lock:" not in started.worker.log_tail() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "timing lock: refused" in started.worker.log_tail(), started.worker.log_tail()
        result = evaluate(PROBLEMS / "leaky_relu.py", CUDA_CANDIDATES / "leaky_relu.py", timed)
        assert result.passed and "candidate" in result.timing, result.summary()
    finally:
        start_ahead.forget()
