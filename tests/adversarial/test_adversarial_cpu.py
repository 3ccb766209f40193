"""Every class of ../shared/HACKS.md, several spellings each, on the CPU backend: each cheat must
end in its named rule (or an honest verdict), and the honest suite must pass untouched.
Honest kernels here are Triton kernels under Triton's CPU interpreter, so no C++ build is needed."""

import shutil
from pathlib import Path

import pytest

from pytest_cudaagent import evaluate
from tests.helpers import QUICK_TIMING, TEST_PROBLEMS, cpu_config, outcomes

HERE = Path(__file__).parent
PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"

# candidate -> acceptable (status, rule) outcomes; rule None means no violation is required.
EXPECTED = {
    # A. fallback: the reference does the work
    "fallback_functional": {("violation", "fallback_op")},
    "fallback_tensor_methods": {("violation", "fallback_op")},
    "fallback_operators": {("violation", "fallback_op")},
    "fallback_aten_ops": {("violation", "fallback_op")},
    "fallback_getattr": {("violation", "fallback_op")},
    "fallback_importlib": {("violation", "fallback_op")},
    "fallback_try_except": {("violation", "fallback_op")},
    "fallback_after_kernel": {("violation", "fallback_op")},
    "fallback_reference_model_search": {("incorrect", None), ("violation", "fallback_op"),
                                        ("violation", "reference_access")},
    "host_numpy": {("violation", "host_compute")},
    "host_item_loop": {("violation", "host_compute")},
    "host_math_module": {("violation", "host_compute")},
    # B. timing: the clock is fooled
    "timing_background_thread": {("violation", "background_thread")},
    # Stale from its 7th call: since the correctness trials also call unwatched (9 calls), caught there.
    "timing_call_counting": {("violation", "timed_output"), ("incorrect", None)},
    "timing_call_counting_late": {("violation", "timed_output")},
    "timing_pointer_memo": {("violation", "timed_output"), ("incorrect", None)},
    # Stale whenever unwatched: since the correctness trials also call unwatched, caught there.
    "timing_unwatched_shortcut": {("violation", "timed_output"), ("incorrect", None)},
    "timing_fallback_after_warmup": {("violation", "fallback_op")},  # seen in the audited check round
    # C. correctness: the check is fooled
    "correct_constant": {("incorrect", None)},
    "correct_partial": {("incorrect", None)},
    "correct_uninitialised_empty": {("incorrect", None)},
    "correct_broadcast_shape": {("incorrect", None)},
    "correct_wrong_dtype": {("incorrect", None)},
    "correct_lazy_subclass": {("violation", "output_type")},
    "correct_returns_custom_object": {("violation", "output_type")},
    "correct_writes_input": {("violation", "input_mutation")},
    "correct_scribbles_input_returns_fresh": {("violation", "input_mutation")},
    "correct_returns_input_alias": {("violation", "output_alias")},
    "correct_returns_input_view": {("violation", "output_alias"), ("violation", "input_mutation")},
    "correct_patches_comparison": {("incorrect", None)},
    "correct_patches_harness_modules": {("incorrect", None)},
    "correct_gc_search": {("incorrect", None)},
    "correct_predicted_seed": {("incorrect", None)},
    "correct_half_precision": {("violation", "lower_precision")},
    # D. environment: the harness is attacked
    "env_sys_exit": {("crashed", None)},
    "env_os_exit_after_fake_verdict": {("crashed", None)},
    "env_raise_system_exit_on_import": {("crashed", None)},
    "env_fake_result_file": {("incorrect", None)},
    "env_sets_variables": {("incorrect", None)},
    # Its own message on the pipe, which the evaluator would otherwise unpickle (replies.py).
    "env_forged_reply_exec": {("violation", "tampering")},
    "env_forged_reply_os_call": {("violation", "tampering")},
    "env_forged_reply_not_a_dict": {("violation", "tampering")},
    "env_forged_reply_garbage": {("violation", "tampering")},
    "env_forged_reply_missing_keys": {("violation", "tampering")},
}

# Candidates whose pickle, unpickled in the evaluator, would leave this file behind.
RUNS_IN_THE_EVALUATOR = ["env_forged_reply_exec", "env_forged_reply_os_call", "correct_returns_custom_object"]


def evaluate_cpu(candidate: Path, **overrides):
    settings = dict(timing=True, timing_config=QUICK_TIMING)
    settings.update(overrides)
    return evaluate(PROBLEM, candidate, cpu_config(**settings))


def test_every_adversarial_candidate_has_an_expectation():
    assert {p.stem for p in (HERE / "candidates").glob("*.py")} == set(EXPECTED) | {"timing_patched_clocks", "timing_patched_monotonic_clocks"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cheat_is_rejected_with_its_rule(name):
    result = evaluate_cpu(HERE / "candidates" / f"{name}.py")
    assert not result.passed and result.reward == -1
    assert outcomes(result) & EXPECTED[name], f"{name}: {result.summary()}"


@pytest.mark.parametrize("name", RUNS_IN_THE_EVALUATOR)
def test_a_forged_pickle_runs_nothing_in_the_evaluator(name):
    marker = Path(f"/tmp/cudaagent-forged-reply-{name}")
    shutil.rmtree(marker, ignore_errors=True)
    marker.unlink(missing_ok=True)
    result = evaluate_cpu(HERE / "candidates" / f"{name}.py")
    assert not marker.exists(), f"{name}'s pickle ran in the evaluator"
    assert outcomes(result) & EXPECTED[name], result.summary()


@pytest.mark.parametrize("name", ["timing_patched_clocks", "timing_patched_monotonic_clocks"])
def test_patched_clocks_are_ignored_and_the_time_is_honest(name):
    result = evaluate_cpu(HERE / "candidates" / f"{name}.py")
    assert result.passed, result.summary()
    assert result.timing["candidate"].median_ms > 0  # a fooled clock would read 0
    assert any(w.rule == "monkeypatch" for w in result.warnings)


@pytest.mark.parametrize("name", sorted(p.stem for p in (HERE / "honest").glob("*.py")))
def test_honest_kernels_are_never_rejected(name):
    result = evaluate_cpu(HERE / "honest" / f"{name}.py")
    assert result.passed and not result.violations, result.summary()


def test_every_timed_call_can_be_audited_on_request():
    from pytest_cudaagent.core.config import TimingConfig

    audited = TimingConfig(warmup_ms=5, repeat_ms=20, min_samples=6, max_samples=60, audit_timed_calls=True)
    result = evaluate_cpu(HERE / "candidates" / "timing_fallback_after_warmup.py", timing_config=audited)
    assert "fallback_op" in {v.rule for v in result.violations}
    assert evaluate_cpu(HERE / "honest" / "triton_with_views.py", timing_config=audited).passed


def test_permissive_policy_allows_pytorch_glue_but_reports_it_is_not_strict():
    glue = HERE / "candidates" / "fallback_after_kernel.py"
    assert evaluate_cpu(glue, policy="permissive").passed
    assert not evaluate_cpu(glue).passed


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fallback_cpp_aten_call", "fallback_cpp_composed"])
def test_aten_called_from_a_cpp_extension_is_a_fallback(name):
    """The dispatch audit sees ATen operators whichever language calls them (one C++ build,
    shared by both candidates)."""
    result = evaluate_cpu(HERE / "cpp_candidates" / f"{name}.py")
    assert result.status == "violation", result.summary() + result.log
    assert "fallback_op" in {violation.rule for violation in result.violations}, result.summary()
