"""Memo keyed by input contents and honest-only-when-watched (HACKS.md B), on the CPU backend and
on the GPU: every timed call gets content no call has seen, its outputs are checked, and bare
calls must take the time the watched ones showed. Also: output storage reused across calls is
reported apart from skipped work, and a numerical difference apart from a wrong answer."""

from pathlib import Path

import pytest
import torch

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.core.config import DEFAULT_TOLERANCES, TimingConfig
from pytest_cudaagent.evaluation import judge_checked_call
from tests.helpers import PROBLEMS, QUICK_TIMING, TEST_PROBLEMS, cpu_config, outcomes

HERE = Path(__file__).parent / "memo_candidates"
PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"
LARGE_PROBLEM = PROBLEMS / "leaky_relu.py"

# (status, rule) each cheat may end with. Since the correctness trials also call unwatched, the
# memos that gamble from their first unwatched call fail there; the late one only in timed calls.
TIMED_OUTPUT, CAUGHT_UNWATCHED = ("violation", "timed_output"), ("incorrect", None)
EXPECTED_RULE = {
    "content_memo_clone": {CAUGHT_UNWATCHED},
    "content_memo_pointer": {CAUGHT_UNWATCHED},
    "content_memo_profile_aware": {CAUGHT_UNWATCHED},
    "content_memo_late": {TIMED_OUTPUT},
}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def config_for(device: str, **overrides) -> EvalConfig:
    if device == "cpu":
        return cpu_config(**{"timing": True, "timing_config": QUICK_TIMING, **overrides})
    return EvalConfig(**{"device": "cuda", "baselines": (), **overrides})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(EXPECTED_RULE))
def test_memo_and_watch_aware_cheats_are_rejected(name, device):
    result = evaluate(PROBLEM, HERE / f"{name}.py", config_for(device, policy="permissive"))
    assert result.reward == -1, result.summary()
    assert outcomes(result) & EXPECTED_RULE[name], result.summary()
    if CAUGHT_UNWATCHED in EXPECTED_RULE[name]:
        assert any("without the operator audit" in (trial.error or "") for trial in result.trials), result.summary()


@pytest.mark.gpu
def test_a_fallback_taken_only_when_unwatched_is_timing_inconsistent_on_the_gpu():
    """Right outputs every call; bare calls run PyTorch's kernel, faster than the busy time of
    the candidate's own kernels when profiled. On 16M elements, where the kernels are the time:
    on the 128K-element problem a call is ~2 us of kernels under ~3 us of launch and events, and
    bare calls (4.5 us on the H100) stay above any bound that spares honest glue."""
    result = evaluate(LARGE_PROBLEM, HERE / "unwatched_fallback.py", config_for("cuda", policy="permissive"))
    assert result.status == "violation" and "timing_inconsistent" in {v.rule for v in result.violations}, result.summary()


def test_the_cpu_watched_time_rule_flags_only_gaps_the_watch_cannot_explain():
    """On the CPU the rule is off by default (the Python-level watch's cost swings with load,
    config.py); set, it flags only gaps the watch cannot explain. Numbers measured on the CI box."""
    from pytest_cudaagent.evaluation import watched_time_violation

    assert watched_time_violation(1.0, [690.0, 710.0, 705.0], 6, 400, TimingConfig()) is None  # off
    timing = TimingConfig(cpu_inconsistent_fraction=0.01)
    # The fallback cheat: 2 interpreted kernels watched (~700 ms), PyTorch unwatched (~1 ms).
    assert watched_time_violation(1.0, [690.0, 710.0, 705.0], 6, 400, timing).rule == "timing_inconsistent"
    # Honest glue under heavy load: 36 small operators, 6.7 ms bare against 143.6 ms watched.
    assert watched_time_violation(6.7, [143.6, 140.0, 150.0], 36, 2400, timing) is None
    # All of the watched time explained by the watch: never flagged.
    assert watched_time_violation(0.1, [50.0], 300, 2000, timing) is None
    assert watched_time_violation(0.1, [], 0, 0, timing) is None


@pytest.mark.parametrize("device", DEVICES)
def test_a_persistent_output_buffer_is_not_skipped_work(device):
    """Recomputed into the same storage every call: the timed calls are right (no timed_output);
    the reuse is its own rule, a warning under permissive and a violation under strict."""
    candidate = HERE / "persistent_output_buffer.py"
    permissive = evaluate(PROBLEM, candidate, config_for(device, policy="permissive"))
    assert permissive.passed, permissive.summary()
    assert "output_reused" in {w.rule for w in permissive.warnings}
    strict = evaluate(PROBLEM, candidate, config_for(device, policy="strict", timing=False))
    assert strict.status == "violation" and {v.rule for v in strict.violations} == {"output_reused"}, strict.summary()


@pytest.mark.parametrize("device", DEVICES)
def test_output_storage_reused_calls_later_is_found_once_the_trials_end(device):
    """Triple-buffered outputs: a result is overwritten three calls after it was handed out, not
    at the next call. The held outputs are compared once, after the last correctness call, and
    still see it; a persistent workspace whose results are fresh storage is no reuse."""
    rotating = evaluate(PROBLEM, HERE / "rotating_output_buffers.py", config_for(device, policy="strict", timing=False))
    assert rotating.status == "violation" and {v.rule for v in rotating.violations} == {"output_reused"}, \
        rotating.summary()
    workspace = evaluate(PROBLEM, HERE / "persistent_workspace_fresh_output.py",
                         config_for(device, policy="strict", timing=False))
    assert workspace.passed and not workspace.violations and not workspace.warnings, workspace.summary()


def test_a_few_elements_just_outside_tolerance_are_a_numerical_difference():
    timing = TimingConfig()
    expected = [torch.zeros(100_000)]
    one_off = expected[0].clone()
    one_off[7] = 0.02  # atol 1e-2: outside, but within 10x
    verdict = judge_checked_call("timed call 3 of 40", expected, [one_off], DEFAULT_TOLERANCES, timing)
    assert verdict.rule == "numerical_difference" and "not skipped work" in verdict.detail
    stale = torch.randn(100_000)
    verdict = judge_checked_call("timed call 3 of 40", expected, [stale], DEFAULT_TOLERANCES, timing)
    assert verdict.rule == "timed_output" and "work skipped" in verdict.detail
    far_off = expected[0].clone()
    far_off[7] = 5.0  # one element, but far outside: not a rounding difference
    assert judge_checked_call("c", expected, [far_off], DEFAULT_TOLERANCES, timing).rule == "timed_output"
    assert judge_checked_call("c", expected, [expected[0].clone()], DEFAULT_TOLERANCES, timing) is None


GLUE = Path(__file__).parent / "honest_glue"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["many_small_ops", "small_cnn"])
def test_honest_glue_with_many_launches_is_never_timing_inconsistent(name, device):
    """Watched, a forward of many small launches spreads its kernels far apart; bare, it does not.
    Neither the busy-time bound (GPU) nor the watched-time bound (CPU) may call that a cheat."""
    result = evaluate(GLUE / f"{name}_problem.py", GLUE / f"{name}_candidate.py",
                      config_for(device, policy="permissive"))
    assert result.passed, result.summary()
    assert "timing_inconsistent" not in {v.rule for v in result.violations}


WATCH_AWARE = [HERE / "content_memo_profile_aware.py",
               Path(__file__).parent / "candidates" / "timing_unwatched_shortcut.py"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("candidate", WATCH_AWARE, ids=lambda path: path.stem)
def test_honest_only_when_watched_fails_correctness_without_any_timing(candidate, device):
    """With timing off there are no bare timed calls to catch it: from the second trial on each
    set is also given unwatched, while the candidate still holds the previous trial's answer.
    KernelBench's eval (nothing watches there) called timing_unwatched_shortcut incorrect on the
    H100, where our correctness-only run had called it correct."""
    result = evaluate(PROBLEM, candidate, config_for(device, policy="permissive", timing=False))
    assert result.status == "incorrect", result.summary()
    failed = [trial for trial in result.trials if not trial.correct]
    assert failed and all("without the operator audit" in trial.error for trial in failed)
    assert result.trials[0].correct  # the first trial, watched, is right: it is the unwatched calls

