"""The evaluator end to end on the CPU backend: real C++ builds, real child processes."""

import pytest

from pytest_cudaagent import BadFileError, ProblemError, evaluate
from pytest_cudaagent.core.result import Result
from tests.helpers import (
    CPU_CANDIDATES,
    PROBLEMS,
    QUICK_TIMING,
    TEST_CANDIDATES,
    TEST_PROBLEMS,
    cpu_config,
)

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"


def run(candidate_name: str, problem=SMALL_LEAKY, **overrides):
    return evaluate(problem, TEST_CANDIDATES / f"{candidate_name}.py", cpu_config(**overrides))


@pytest.mark.slow
def test_honest_cpp_candidate_passes_with_timing_and_eager_baseline():
    config = cpu_config(timing=True, baselines=("eager",))
    result = evaluate(SMALL_LEAKY, CPU_CANDIDATES / "leaky_relu.py", config)
    assert result.status == "passed", result.summary() + result.log
    assert result.passed and result.correct and len(result.trials) == 5
    assert all(trial.correct and trial.max_abs_error == 0.0 for trial in result.trials)
    assert result.timing["candidate"].samples >= QUICK_TIMING.min_samples
    assert result.timing["eager"].median_ms > 0
    assert result.speedup_vs_eager == pytest.approx(
        result.timing["eager"].median_ms / result.timing["candidate"].median_ms)
    assert result.speedup_vs_compile is None
    assert result.reward in (1.0, 2.0)
    assert result.env["device"] == "cpu" and result.env["torch"]
    assert {"reference", "build", "correctness", "timing", "baselines"} <= set(result.phase_seconds)
    # Result.profile: time waiting on each worker request (summed) and the parent's comparisons.
    # (reference.baseline too, when the eager time is not in the baseline cache)
    assert {"reference.prepare", "reference.fresh_sets", "candidate.start", "candidate.build",
            "candidate.construct", "candidate.forward", "candidate.warm", "candidate.time", "compare"} <= set(result.profile)
    assert all(seconds >= 0 for seconds in result.profile.values())
    # The worker's own build time, from its start: at least what the parent still waited for
    # after the sandbox's report and the reference.
    assert result.profile["candidate.built_after"] >= result.profile["candidate.build"] - 0.05
    # CPU seconds of each side's process tree and of the evaluating process.
    assert all(result.profile[f"cpu.{side}"] > 0 for side in ("candidate", "reference", "parent"))
    # The correctness phase is its five forward round trips and their comparisons, little else.
    assert result.profile["candidate.forward"] <= result.phase_seconds["correctness"]
    # The evaluating process's own time outside the phases: until the first, closing, tampering.
    assert result.profile["parent.start"] > 0 and result.profile["parent.close"] > 0
    # Where the memory gate's admission went: its look under the lock, its reservation's write.
    assert {"parent.admission.lock_wait", "parent.admission.look", "parent.admission.reserve"} <= set(result.profile)
    assert result.profile["parent.tampering"] >= 0
    # The workers' own steps inside a request. prepare is sent before the parent waits for it
    # (it works while the candidate starts), so its steps may sum to more than that wait; a
    # correctness call is waited for from its request, so its steps are within the wait.
    prepare_steps = {label: seconds for label, seconds in result.profile.items() if label.startswith("reference.prepare.")}
    assert {"reference.prepare.model", "reference.prepare.inputs", "reference.prepare.forward",
            "reference.prepare.outputs_to_host"} <= set(prepare_steps)
    assert sum(prepare_steps.values()) > 0
    forward_steps = {label: seconds for label, seconds in result.profile.items() if label.startswith("candidate.forward.")}
    assert {"candidate.forward.call", "candidate.forward.outputs_to_host", "candidate.forward.inputs_to_device"} <= set(forward_steps)
    assert sum(forward_steps.values()) <= result.profile["candidate.forward"]
    assert "reference.fresh_sets.forward" in result.profile and result.profile["parent.lend"] >= 0
    assert Result.from_json(result.to_json()).profile == result.profile


@pytest.mark.slow
def test_trial_count_is_configurable():
    result = evaluate(SMALL_LEAKY, CPU_CANDIDATES / "leaky_relu.py", cpu_config(trials=2))
    assert result.passed and len(result.trials) == 2


@pytest.mark.slow
def test_weights_come_from_the_reference_state_dict():
    # ModelNew draws its own random weights; it passes only if the reference's are loaded into it.
    result = evaluate(TEST_PROBLEMS / "small_linear_relu.py", CPU_CANDIDATES / "linear_bias_relu.py", cpu_config())
    assert result.passed, result.summary() + result.log


def test_wrong_shape_is_incorrect():
    result = run("wrong_shape")
    assert result.status == "incorrect" and not result.passed and result.reward == -1
    assert "shape" in result.trials[0].error


def test_nan_output_is_incorrect():
    result = run("nan_output")
    assert result.status == "incorrect"
    assert result.trials[0].mismatches == result.trials[0].numel


def test_non_tensor_output_is_incorrect():
    assert run("returns_list").status == "incorrect"


def test_exception_in_forward_is_runtime_error():
    result = run("raises")
    assert result.status == "runtime_error"
    assert "ValueError: the candidate failed on purpose" in result.error
    assert "ValueError: ValueError" not in result.error  # the type is named once


def test_segfault_is_crashed_and_evaluation_carries_on():
    result = run("segfault")
    assert result.status == "crashed" and "SIGSEGV" in result.error
    assert run("wrong_shape").status == "incorrect"  # the evaluator itself is unharmed


def test_hang_is_timeout():
    result = run("hangs", run_timeout_s=8)
    assert result.status == "timeout" and "8 s" in result.error


def test_sys_exit_in_forward_is_crashed_not_passed():
    result = run("sys_exit")
    assert result.status == "crashed" and not result.passed


def test_os_exit_in_forward_is_crashed_not_passed():
    result = run("os_exit")
    assert result.status == "crashed" and "exited with code 0" in result.error


def test_fake_verdict_printed_on_import_is_ignored():
    result = run("exits_on_import")
    assert result.status == "crashed" and not result.passed and result.reward == -1


def test_memory_cap_kills_the_candidate(tmp_path):
    hog = tmp_path / "hog.py"
    hog.write_text(
        "import time\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, *args):\n        super().__init__()\n"
        "    def forward(self, x):\n        blocks = []\n        for _ in range(40):\n"
        "            blocks.append(b'\\1' * (256 * 2**20))\n            time.sleep(0.1)\n"
        "        return blocks\n")
    result = evaluate(SMALL_LEAKY, hog, cpu_config(memory_cap_gb=1.0))
    assert result.status == "crashed" and "cap" in result.error


@pytest.mark.slow
def test_cpp_that_does_not_compile_is_build_error():
    result = run("build_error")
    assert result.status == "build_error"
    assert "Error building extension" in result.error or "error" in result.log.lower()


def test_bad_candidate_and_problem_files_raise_bad_file_error(tmp_path):
    with pytest.raises(BadFileError, match="no class ModelNew"):
        evaluate(SMALL_LEAKY, TEST_CANDIDATES / "no_model_new.py", cpu_config())
    with pytest.raises(BadFileError, match="syntax error"):
        evaluate(SMALL_LEAKY, TEST_CANDIDATES / "syntax_error.py", cpu_config())
    with pytest.raises(BadFileError, match="no such problem file"):
        evaluate(tmp_path / "nope.py", TEST_CANDIDATES / "raises.py", cpu_config())


def test_broken_reference_is_a_problem_error():
    with pytest.raises(ProblemError, match="this reference is broken on purpose"):
        evaluate(TEST_PROBLEMS / "broken_reference.py", TEST_CANDIDATES / "raises.py", cpu_config())


def test_bundled_cpu_candidates_all_exist_for_bundled_problems():
    problems = {p.stem for p in PROBLEMS.glob("*.py")}
    assert problems == {p.stem for p in CPU_CANDIDATES.glob("*.py")}


@pytest.mark.slow
def test_the_candidates_cpu_seconds_count_its_builds_compilers(tmp_path):
    """cpu.candidate reads the worker's process tree, the children it reaped included: a cold
    build's compilers (through ninja, inside the sandbox's namespace) are most of it."""
    source = (CPU_CANDIDATES / "leaky_relu.py").read_text()
    fresh = tmp_path / "leaky_relu.py"
    fresh.write_text(source.replace('load_inline("', f'load_inline("cpu_counted_{tmp_path.name}_'.replace("-", "_"), 1))
    assert fresh.read_text() != source  # its own extension name: a cold build
    result = evaluate(SMALL_LEAKY, fresh, cpu_config(timing=False, cache_dir=tmp_path / "cache"))
    assert result.status == "passed", result.error
    built = result.profile["candidate.built_after"]
    assert result.profile["cpu.candidate"] >= max(3.0, 0.25 * built), result.profile
    # the worker's own count until built: its build thread and the compilers ninja reaped
    assert max(3.0, 0.25 * built) <= result.profile["cpu.candidate_build"] <= result.profile["cpu.candidate"], result.profile


def test_both_workers_are_asked_to_exit_before_either_is_waited_for(monkeypatch):
    """Their exits (a CUDA context's teardown each on a GPU) overlap instead of queueing."""
    from pytest_cudaagent.workers.channel import Worker

    calls = []
    ask, close = Worker.ask_to_exit, Worker.close
    monkeypatch.setattr(Worker, "ask_to_exit", lambda self: (calls.append(("ask", id(self))), ask(self))[1])
    monkeypatch.setattr(Worker, "close", lambda self: (calls.append(("close", id(self))), close(self))[1])
    result = evaluate(SMALL_LEAKY, CPU_CANDIDATES / "leaky_relu.py", cpu_config(timing=False))
    assert result.status == "passed", result.summary()
    assert [kind for kind, _ in calls[:2]] == ["ask", "ask"] and calls[0][1] != calls[1][1]
    assert {kind for kind, _ in calls[2:]} <= {"ask", "close"} and sum(kind == "close" for kind, _ in calls) == 2
