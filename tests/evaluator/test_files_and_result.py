import json
import os
import sys

import pytest

from pytest_cudaagent import (
    BadFileError,
    Result,
    RewardConfig,
    TimingStats,
    Violation,
    milestone_reward,
)
from pytest_cudaagent.core.files import check_candidate, check_problem, import_file
from tests.helpers import PROBLEMS, TEST_CANDIDATES


def test_problem_without_get_inputs_names_what_is_missing(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("class Model: pass\ndef get_init_inputs(): return []\n")
    with pytest.raises(BadFileError, match=r"p.py: no get_inputs; a problem must define"):
        check_problem(problem)


def test_missing_problem_file_is_a_bad_file(tmp_path):
    with pytest.raises(BadFileError, match="no such problem file"):
        check_problem(tmp_path / "absent.py")


def test_problem_with_syntax_error_names_the_line(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("class Model(:\n")
    with pytest.raises(BadFileError, match="syntax error on line 1"):
        check_problem(problem)


def test_candidate_without_model_new_is_a_bad_file():
    with pytest.raises(BadFileError, match="no class ModelNew"):
        check_candidate(TEST_CANDIDATES / "no_model_new.py")


def test_workspace_without_model_new_is_a_bad_file(tmp_path):
    with pytest.raises(BadFileError, match="must contain model_new.py"):
        check_candidate(tmp_path)


def test_bundled_problems_are_valid():
    for problem in PROBLEMS.glob("*.py"):
        check_problem(problem)


def test_result_json_round_trip_keeps_every_field():
    result = Result("p.py", "c.py", status="passed", passed=True, correct=True,
                    violations=[Violation("fallback_op", "aten::add")],
                    timing={"candidate": TimingStats(1.0, 0.1, 20, 0.9)}, speedup_vs_eager=2.0, reward=2.0)
    again = Result.from_json(result.to_json())
    assert again == result
    fields = json.loads(result.to_json())
    for name in ("status", "passed", "correct", "violations", "trials", "timing", "speedup_vs_eager",
                 "speedup_vs_compile", "reward", "env"):
        assert name in fields


def test_result_rejects_unknown_status():
    with pytest.raises(ValueError, match="status"):
        Result("p", "c", status="great")


def test_timing_stats_median_and_iqr():
    stats = TimingStats.from_samples([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats.median_ms == 3.0 and stats.samples == 5 and stats.iqr_ms > 0
    assert stats.fast_ms == pytest.approx(1.4)  # the lower decile: 1.0 + 0.4 of the way to 2.0
    assert TimingStats.from_samples([2.5]).fast_ms == 2.5
    assert TimingStats.from_samples([float(n) for n in range(1, 101)]).fast_ms == pytest.approx(10.9)


@pytest.mark.parametrize(("passed", "eager", "compile_", "expected"), [
    (False, None, None, -1.0),
    (True, None, None, 1.0),
    (True, 1.04, None, 1.0),
    (True, 1.2, 0.9, 2.0),
    (True, 1.2, 1.06, 3.0),
])
def test_milestone_reward(passed, eager, compile_, expected):
    result = Result("p", "c", status="passed" if passed else "incorrect", passed=passed,
                    speedup_vs_eager=eager, speedup_vs_compile=compile_)
    assert milestone_reward(result) == expected


def test_reward_thresholds_are_configurable_and_implausible_speedups_capped():
    result = Result("p", "c", status="passed", passed=True, speedup_vs_eager=1.5, speedup_vs_compile=1.5)
    assert milestone_reward(result, RewardConfig(eager_speedup=2.0)) == 1.0
    result.warnings.append(Violation("implausible_speedup", "too good"))
    assert milestone_reward(result) == 2.0


def test_a_file_rewritten_within_the_same_second_to_the_same_length_is_imported_as_it_is_now(tmp_path, monkeypatch):
    """Python would take bytecode cached beside the file as current (same size, same modification
    second): an agent's candidate rewritten that fast would be evaluated on its old code."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    candidate = tmp_path / "model_new.py"
    candidate.write_text("SLOPE = 1\n")
    before = candidate.stat()
    assert import_file(candidate, "rewritten_first").SLOPE == 1
    candidate.write_text("SLOPE = 2\n")
    os.utime(candidate, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert import_file(candidate, "rewritten_second").SLOPE == 2
    assert not list(tmp_path.rglob("*.pyc"))  # nothing written beside it either
