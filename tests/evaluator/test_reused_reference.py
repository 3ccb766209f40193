"""A reference worker's process serving the next problem of its evaluating process
(reused_reference.py): the same process, each problem's verdict as from a fresh one, and a fresh
process instead wherever a problem left something behind, the reference failed, the evaluation
timed, or the process did not allow it."""

import sys

import psutil
import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.evaluation import ProblemError
from pytest_cudaagent.workers import reused_reference
from tests.helpers import PROBLEMS, TEST_PROBLEMS, cpu_config

LEAKY, TWO_INPUTS, ROW_SUM = PROBLEMS / "leaky_relu.py", TEST_PROBLEMS / "two_inputs_add.py", PROBLEMS / "row_sum.py"


@pytest.fixture(autouse=True)
def allowed():
    reused_reference.allow()
    yield
    reused_reference.allow(False)


def config(**overrides):
    return cpu_config(**{"policy": "permissive", **overrides})


def its_own_model(problem, directory) -> str:
    """A candidate that is its problem's own code (ModelNew = Model), written beside nothing."""
    path = directory / f"{problem.stem}_as_candidate.py"
    path.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    return path


def reference_pid(result) -> int:
    return result.env["pids"]["reference"]


def ended(pid: int, within_s: float = 10.0) -> bool:
    """The process has exited (gone, or a zombie its parent has yet to reap)."""
    try:
        psutil.Process(pid).wait(timeout=within_s)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return True


def test_the_next_problems_are_served_by_the_same_process(tmp_path):
    leaky = evaluate(LEAKY, its_own_model(LEAKY, tmp_path), config())
    two = evaluate(TWO_INPUTS, its_own_model(TWO_INPUTS, tmp_path), config())
    # The first problem's code against the third problem: wrong, and found wrong by the process
    # that served the first (it answers for the problem it was sent, not the one it had).
    wrong = evaluate(ROW_SUM, its_own_model(LEAKY, tmp_path), config())
    right = evaluate(ROW_SUM, its_own_model(ROW_SUM, tmp_path), config())
    assert [leaky.status, two.status, right.status] == ["passed"] * 3, [leaky.error, two.error, right.error]
    assert wrong.status != "passed" and not wrong.correct
    assert len({reference_pid(result) for result in (leaky, two, wrong, right)}) == 1
    assert "reference_reused" not in leaky.env
    assert [result.env["reference_reused"] for result in (two, wrong, right)] == [1, 2, 3]
    # Each evaluation's own accounts: the reference's CPU seconds since it was sent its problem.
    assert all(0 <= result.profile["cpu.reference"] < leaky.profile["cpu.reference"] + 5 for result in (two, right))
    assert "reference.prepare" in two.profile and "parent.spawn_reference" in two.profile
    assert not ended(reference_pid(leaky), within_s=0.5)  # waiting for the next problem
    reused_reference.allow(False)
    assert ended(reference_pid(leaky))  # ended with the slot


def test_a_timed_evaluation_starts_its_own_and_leaves_the_waiting_one(tmp_path):
    candidate = its_own_model(TWO_INPUTS, tmp_path)
    first = evaluate(TWO_INPUTS, candidate, config())
    timed = evaluate(TWO_INPUTS, candidate, config(timing=True, baselines=("eager",)))
    after = evaluate(TWO_INPUTS, candidate, config())
    assert [first.status, timed.status, after.status] == ["passed"] * 3, [first.error, timed.error, after.error]
    assert reference_pid(timed) != reference_pid(first) and "reference_reused" not in timed.env
    assert ended(reference_pid(timed))
    assert reference_pid(after) == reference_pid(first) and after.env["reference_reused"] == 1


LEFT_BEHIND = {
    "sys.path": "import sys\nsys.path.append('/nonexistent/problem/helpers')\n",
    "deterministic algorithms": "import torch\ntorch.use_deterministic_algorithms(True)\n",
    "grad mode": "import torch\ntorch.set_grad_enabled(False)\n",
    "a helper beside it": "import reused_reference_helper_module\n",
}


@pytest.mark.parametrize("what", sorted(LEFT_BEHIND))
def test_a_problem_that_leaves_something_behind_is_served_alone(tmp_path, what):
    (tmp_path / "reused_reference_helper_module.py").write_text("VALUE = 1\n")
    problem = tmp_path / "leaves_something.py"
    problem.write_text(LEFT_BEHIND[what] + TWO_INPUTS.read_text())
    leaving = evaluate(problem, its_own_model(TWO_INPUTS, tmp_path), config())
    following = evaluate(TWO_INPUTS, its_own_model(TWO_INPUTS, tmp_path), config())
    assert [leaving.status, following.status] == ["passed"] * 2, [leaving.error, following.error]
    assert reference_pid(following) != reference_pid(leaving) and "reference_reused" not in following.env
    sys.modules.pop("reused_reference_helper_module", None)


def test_a_failed_reference_is_not_kept(tmp_path):
    first = evaluate(TWO_INPUTS, its_own_model(TWO_INPUTS, tmp_path), config())
    with pytest.raises(ProblemError):
        evaluate(TEST_PROBLEMS / "broken_reference.py", its_own_model(TWO_INPUTS, tmp_path), config())
    after = evaluate(TWO_INPUTS, its_own_model(TWO_INPUTS, tmp_path), config())
    assert after.status == "passed", after.error
    # The broken problem took the waiting process, and failed in it: the next one is fresh.
    assert reference_pid(after) != reference_pid(first) and "reference_reused" not in after.env


def test_nothing_waits_unless_the_process_allows_it_or_when_turned_off(tmp_path, monkeypatch):
    candidate = its_own_model(TWO_INPUTS, tmp_path)
    reused_reference.allow(False)
    alone = evaluate(TWO_INPUTS, candidate, config())
    assert ended(reference_pid(alone))
    reused_reference.allow()
    monkeypatch.setenv(reused_reference.ENABLE_ENV, "0")
    first, second = (evaluate(TWO_INPUTS, candidate, config()) for _ in range(2))
    assert reference_pid(first) != reference_pid(second) and "reference_reused" not in second.env


def test_a_process_serves_a_bounded_number_of_problems(tmp_path, monkeypatch):
    monkeypatch.setattr(reused_reference, "PROBLEMS_AT_MOST", 2)
    candidate = its_own_model(TWO_INPUTS, tmp_path)
    results = [evaluate(TWO_INPUTS, candidate, config()) for _ in range(3)]
    assert [result.status for result in results] == ["passed"] * 3
    assert reference_pid(results[0]) == reference_pid(results[1]) != reference_pid(results[2])


def test_left_behind_reads_state_and_modules(tmp_path, monkeypatch):
    import torch

    before, modules = reused_reference.process_state(), set(sys.modules)
    assert reused_reference.left_behind(before, modules, "cudaagent_reference_problem") == ""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert "default_dtype" in reused_reference.left_behind(before, modules, "cudaagent_reference_problem")
    finally:
        torch.set_default_dtype(previous)
    (tmp_path / "a_local_helper_for_left_behind.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import a_local_helper_for_left_behind  # noqa: F401

    monkeypatch.setattr(sys, "path", before["sys_path"])  # sys.path as it was: only the module differs
    try:
        assert "a_local_helper_for_left_behind" in reused_reference.left_behind(before, modules, "x")
        # The problem's own module is replaced by the next load, not a reason.
        assert reused_reference.left_behind(before, modules, "a_local_helper_for_left_behind") == ""
    finally:
        sys.modules.pop("a_local_helper_for_left_behind", None)
    import json.tool  # noqa: F401 - from the standard library, and torch from the installed packages: no reason

    assert reused_reference.left_behind(before, modules - {"json.tool", "torch.nn.functional"}, "x") == ""
