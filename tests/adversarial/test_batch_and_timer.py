"""Candidates that attack the batch and the timer (#44; ../shared/HACKS.md B and C), on the CPU
backend: outputs computed on first read (lazy pages), the worker's own clock and reply, the timing
lock's directory, inputs nested in lists and dicts, threads the guard never saw. Each class in
several variants, each ending in its named rule, and honest counterparts that pass untouched.
Candidates in batch_timer_candidates/; the C ones build with gcc at import (under a second)."""

import re
import shutil
import time
from pathlib import Path

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.workers import start_ahead
from pytest_cudaagent.workers.reference_batch import close_kept
from tests.helpers import QUICK_TIMING, TEST_PROBLEMS, cpu_config, outcomes

HERE = Path(__file__).parent
CANDIDATES = HERE / "batch_timer_candidates"
LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
NESTED = TEST_PROBLEMS / "nested_inputs.py"

# candidate -> acceptable (status, rule) outcomes (outcomes() in tests/helpers.py).
EXPECTED = {
    # Lazy pages: the output's pages computed by a SIGSEGV handler when first read.
    "lazy_pages_all": {("violation", "lazy_output")},
    "lazy_pages_seven_eighths": {("violation", "lazy_output")},
    # The worker's own clock, found through gc, or its reply rewritten.
    "clock_gc_slowed": {("violation", "timing_unaccounted")},
    "clock_gc_slowed_from_now": {("violation", "timing_unaccounted")},
    "clock_gc_scaled_calls": {("violation", "timing_unaccounted")},
    "clock_reply_rewritten": {("violation", "timing_unaccounted")},
    # Threads the candidate started, working between the timed calls.
    "threads_native_deferred_work": {("violation", "background_thread")},
    "threads_python_at_import_deferred_work": {("violation", "background_thread")},
    "threads_ctypes_pthread_deferred_work": {("violation", "background_thread")},
    "threads_native_started_in_forward": {("violation", "background_thread")},
    # Inputs nested in a list and a dict, written into.
    "nested_zeroes_after_answer": {("violation", "input_mutation")},
    "nested_zeroes_when_unwatched": {("violation", "input_mutation")},
    "nested_appends_to_input_list": {("violation", "input_mutation")},
}
HONEST = ["threads_idle_honest", "nested_honest_triton"]
# Attack the shared machinery rather than the verdict: tested on what they did, below.
SHARED_MACHINERY = ["lock_held_from_import", "lock_dir_carries_inputs"]
# The GPU's forms (test_batch_and_timer_gpu.py).
GPU_ONLY = ["gpu_lazy_managed_memory", "gpu_lazy_host_mapped", "gpu_clock_events_slowed", "gpu_slow_relu_honest"]


def problem_of(name: str) -> Path:
    return NESTED if name.startswith("nested") else LEAKY


def evaluate_timed(name: str, **overrides):
    settings = dict(timing=True, timing_config=QUICK_TIMING, policy="permissive")
    settings.update(overrides)
    return evaluate(problem_of(name), CANDIDATES / f"{name}.py", cpu_config(**settings))


def test_every_candidate_has_an_expectation():
    assert {path.stem for path in CANDIDATES.glob("*.py")} == (set(EXPECTED) | set(HONEST) | set(SHARED_MACHINERY)
                                                              | set(GPU_ONLY))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cheat_is_rejected_with_its_rule(name):
    result = evaluate_timed(name)
    assert not result.passed and result.reward == -1
    assert outcomes(result) & EXPECTED[name], f"{name}: {result.summary()}\n{result.log[-1500:]}"


@pytest.mark.parametrize("name", HONEST)
def test_honest_counterpart_passes_under_the_strict_policy(name):
    result = evaluate_timed(name, policy="strict")
    assert result.passed and not result.violations, result.summary() + result.log[-1500:]
    # Seen from outside its worker, and accounted for: its own threads idle, its time its calls'.
    account = result.timed_request
    assert account["unaccounted_ms"] <= account["allowed_ms"] and account["new_threads_cpu_ms"] == 0.0, account


def test_a_nested_input_problem_passes_with_pytorch_glue_and_every_timed_call_checked(tmp_path):
    """Before #44 the timer refilled only top-level tensors: every timed call reran the warm-up
    set's nested scale and shift against fresh reference answers, and an honest candidate was
    `timed_output`."""
    glue = CANDIDATES / "nested_zeroes_after_answer.py"
    honest = glue.read_text().replace("        scale.zero_()\n        extra[\"shift\"].zero_()\n", "")
    path = tmp_path / "nested_glue.py"
    path.write_text(honest)
    result = evaluate(NESTED, path, cpu_config(timing=True, timing_config=QUICK_TIMING, policy="permissive",
                                               baselines=("eager",)))
    assert result.passed and not result.violations, result.summary()
    assert result.timing["candidate"].samples >= QUICK_TIMING.min_samples


def test_nested_inputs_written_by_one_candidate_do_not_reach_the_next_of_its_batch():
    """The batch's kept reference sends every candidate copies of its nested tensors too: before
    #44 a candidate that zeroed them poisoned the kept sets, and the next honest candidate got
    `nondeterministic_reference`."""
    close_kept()
    try:
        batch = cpu_config(timing=False, policy="permissive", reference_batch="nested-44")
        vandal = evaluate(NESTED, CANDIDATES / "nested_zeroes_after_answer.py", batch)
        honest = evaluate(NESTED, CANDIDATES / "nested_honest_triton.py", batch)
    finally:
        close_kept()
    assert outcomes(vandal) & {("violation", "input_mutation")}, vandal.summary()
    assert honest.env["reference_shared"] == 2
    assert honest.passed, honest.summary()


@pytest.fixture
def private_locks(tmp_path, monkeypatch):
    """A lock directory of this test's own, so the candidate finds the very one the evaluator uses."""
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path / "locks"))
    start_ahead.forget()
    yield tmp_path / "locks" / "cudaagent-locks"
    start_ahead.forget()


def test_a_candidate_started_ahead_cannot_take_the_timing_lock(private_locks, tmp_path):
    """#44: a candidate started ahead took the timing lock at import and held it; the honest
    candidate timed next got no answer within the run's timeout. Now its attempt is refused, and
    the honest candidate is timed."""
    first = tmp_path / "first.py"
    shutil.copy(HERE / "sandbox_candidates" / "honest_torch.py", first)
    holder = CANDIDATES / "lock_held_from_import.py"
    config = cpu_config(timing=True, timing_config=QUICK_TIMING, policy="permissive", run_timeout_s=60)
    start_ahead.state().announce(LEAKY, holder, config)
    assert evaluate(LEAKY, first, cpu_config(policy="permissive", trials=2)).passed
    started = start_ahead.state()._started
    assert started is not None
    deadline = time.monotonic() + 120
    while "timing lock:" not in started.worker.log_tail() and time.monotonic() < deadline:
        time.sleep(0.1)  # its import has tried the lock
    assert "timing lock: refused" in started.worker.log_tail(), started.worker.log_tail()
    # Still alive, still waiting for its evaluation: the next timing is not held up by it.
    timed = evaluate(LEAKY, HERE / "sandbox_candidates" / "honest_torch.py", config)
    assert timed.passed and "candidate" in timed.timing, timed.summary()
    assert evaluate(LEAKY, holder, config).passed  # and its own evaluation goes on as an honest one


def test_nothing_a_candidate_writes_reaches_the_next_evaluation(private_locks):
    """#44: a file in the lock directory carried the first values of one evaluation's trial inputs
    to the next. The directory, /tmp and the host's /dev/shm are closed to a candidate now."""
    carrier = CANDIDATES / "lock_dir_carries_inputs.py"
    first = evaluate(LEAKY, carrier, cpu_config(policy="permissive", trials=2))
    second = evaluate(LEAKY, carrier, cpu_config(policy="permissive", trials=2))
    assert first.passed and second.passed, (first.summary(), second.summary())
    assert "carried from an earlier evaluation" not in second.log, second.log
    assert len(re.findall(r"^nothing carried in ", second.log, flags=re.MULTILINE)) == 3, second.log
    assert not (private_locks / "cudaagent-carried-inputs.txt").exists()
    assert not Path("/tmp/cudaagent-carried-inputs.txt").exists()
