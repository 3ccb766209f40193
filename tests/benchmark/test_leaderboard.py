"""Leaderboard arithmetic and reports, from results files written in the evaluator's format."""

import math

import pandas as pd
import pytest

from benchmark.leaderboard import Leaderboard, markdown_table, run_names, to_markdown
from benchmark.reports import write_reports
from pytest_cudaagent.core.result import Violation

from .bench_helpers import fake_result, run_cli, write_results

P1 = "/kb/KernelBench/level1/1_A.py"
P2 = "/kb/KernelBench/level1/2_B.py"
Q1 = "/kb/KernelBench/level2/1_C.py"


def _cand(name: str) -> str:
    return f"/runs/{name}"


@pytest.fixture
def runs(tmp_path):
    old = write_results(tmp_path / "old" / "results.jsonl", [
        fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=1.0, eager_ms=2.0, compile_ms=1.5),
        fake_result(P1, _cand("level_1_problem_1_sample_1_kernel.py"), status="incorrect"),
        fake_result(P2, _cand("level_1_problem_2_sample_0_kernel.py"), status="build_error"),
        fake_result(Q1, _cand("level_2_problem_1_sample_0_kernel.py"), candidate_ms=4.0, eager_ms=2.0,
                    compile_ms=1.0, precision=["tf32"]),
    ])
    new = write_results(tmp_path / "new" / "results.jsonl", [
        fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=0.5, eager_ms=2.0, compile_ms=1.5),
        fake_result(P2, _cand("level_1_problem_2_sample_0_kernel.py"), candidate_ms=1.0, eager_ms=1.0, compile_ms=1.0),
        fake_result(Q1, _cand("level_2_problem_1_sample_0_kernel.py"), status="incorrect",
                    env={"device": "cuda", "gpu_name": "Other GPU", "torch": "2.11.0"}),
    ])
    return old, new


def _row(table: pd.DataFrame, **where) -> dict:
    mask = pd.Series(True, index=table.index)
    for column, value in where.items():
        mask &= table[column] == value
    rows = table[mask].to_dict("records")
    assert len(rows) == 1, rows
    return rows[0]


def test_level_summary_counts_best_of_k_and_both_geomean_conventions(runs):
    board = Leaderboard.from_files([runs[0]])
    level1 = _row(board.summary, run="old", level="level1")
    assert level1["problems"] == 2 and level1["candidates"] == 3
    assert level1["compiled %"] == 50.0  # 2_B never built
    assert level1["pass@1 %"] == 25.0  # 1_A: 1 of 2 samples, 2_B: 0 of 1
    assert level1["correct (fast_0) %"] == 50.0
    assert level1["fast_1 vs eager %"] == 50.0 and level1["fast_1 vs compile %"] == 50.0
    assert level1["geomean vs eager (correct)"] == 2.0
    assert level1["geomean vs eager (all, failures=1x)"] == round(math.sqrt(2.0), 3)
    assert level1["geomean vs compile (all, failures=1x)"] == round(math.sqrt(1.5), 3)
    assert level1["mean reward"] == round((3 - 1 - 1) / 3, 3)
    level2 = _row(board.summary, run="old", level="level2")
    assert level2["fast_1 vs eager %"] == 0.0 and level2["geomean vs compile (correct)"] == 0.25
    assert level2["lower precision % of passed"] == 100.0
    overall = _row(board.summary, run="old", level="all")
    assert overall["problems"] == 3 and overall["lower precision % of passed"] == 50.0


def test_fast_p_thresholds_and_reward_distribution(runs):
    board = Leaderboard.from_files([runs[0]])
    eager = _row(board.fast_p, run="old", level="level1", baseline="eager")
    assert [eager[f"fast_{p} %"] for p in ("0", "0.5", "0.8", "1", "1.5", "2")] == [50, 50, 50, 50, 50, 0]
    compile_ = _row(board.fast_p, run="old", level="level2", baseline="compile")
    assert compile_["fast_0 %"] == 100 and compile_["fast_0.5 %"] == 0
    assert not (board.fast_p["baseline"] == "max-autotune").any()  # never timed: no row
    rewards = _row(board.rewards, run="old", level="level1")
    assert (rewards["reward -1"], rewards["reward 1"], rewards["reward 3"]) == (2, 0, 1)


def test_best_sample_is_the_fastest_passing_one(tmp_path):
    path = write_results(tmp_path / "results.jsonl", [
        fake_result(P1, _cand("a_sample_0.py"), candidate_ms=1.0),
        fake_result(P1, _cand("a_sample_1.py"), candidate_ms=0.5),
        fake_result(P1, _cand("a_sample_2.py"), status="runtime_error"),
    ])
    best = Leaderboard.from_files([path]).problems
    row = _row(best, problem="1_A.py")
    assert (row["samples"], row["passed"], row["candidate ms"], row["vs compile"]) == (3, 2, 0.5, 3.0)


def test_two_runs_show_which_problems_changed_and_their_environments(runs):
    board = Leaderboard.from_files(list(runs))
    changes = {row["problem"]: row["change"] for row in board.changes.to_dict("records")}
    assert changes == {"1_A.py": "faster", "2_B.py": "fixed", "1_C.py": "broken"}
    environment = board.environment.set_index("run")
    assert environment.loc["old", "gpu_name"] == "Test GPU"
    assert environment.loc["new", "gpu_name"] == "Other GPU, Test GPU"


def test_reports_markdown_csv_and_self_contained_html(runs, tmp_path):
    paths = write_reports(Leaderboard.from_files(list(runs)), tmp_path / "report")
    markdown = paths["markdown"].read_text()
    assert "## Changes between runs" in markdown and "| old | level1 | 2 | 3 |" in markdown
    csv = pd.read_csv(paths["csv"])
    assert set(csv["run"]) == {"old", "new"} and "fast_1 vs compile %" in csv.columns
    html = paths["html"].read_text()
    assert html.count("data:image/png;base64,") == 3
    # Every table in a box of its own that scrolls sideways rather than clipping its last columns.
    assert html.count("<table") == html.count('<div class="scroll"><table') > 0
    assert ".scroll{overflow-x:auto" in html
    assert "Other GPU" in html and "<script" not in html and "http" not in html.replace("http-equiv", "")


def test_leaderboard_command(runs, tmp_path, capsys):
    assert run_cli(["leaderboard", str(runs[0]), str(runs[1]), "--out", str(tmp_path / "lb")]) == 0
    assert (tmp_path / "lb" / "report.html").exists() and (tmp_path / "lb" / "leaderboard.csv").exists()
    assert run_cli(["leaderboard", str(runs[0])]) == 0
    assert "| old | level1 |" in capsys.readouterr().out
    assert run_cli(["leaderboard", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such results file" in capsys.readouterr().err


def test_examples_level_and_run_names(tmp_path):
    from benchmark.kernelbench import EXAMPLES_PROBLEMS

    path = write_results(tmp_path / "run.jsonl", [fake_result(str(EXAMPLES_PROBLEMS / "softmax.py"), "/c/softmax.py")])
    assert set(Leaderboard.from_files([path]).summary["level"]) == {"examples"}
    assert run_names([tmp_path / "a" / "results.jsonl", tmp_path / "b" / "a.jsonl"]) == ["a", "a-2"]


def test_markdown_table_formats_missing_values():
    assert markdown_table(pd.DataFrame({"x": [1.5, math.nan], "y": ["a|b", "c"]})).splitlines()[2:] == [
        "| 1.5 | a\\|b |", "| - | c |"]


def _flagged(result, rule: str, detail: str):
    """`result` with a review rule, as the evaluator records it: a violation for
    timing_inconsistent, a warning for the others."""
    (result.violations if result.status == "violation" else result.warnings).append(Violation(rule, detail))
    return result


HEADLINE = ["problems", "candidates", "correct (fast_0) %", "fast_1 vs eager %", "fast_1 vs compile %",
            "geomean vs eager (correct)", "geomean vs compile (correct)", "geomean vs eager (all, failures=1x)",
            "geomean vs compile (all, failures=1x)", "mean reward"]


def test_flagged_rows_timed_near_zero_move_no_headline_number_and_are_listed_for_review(tmp_path):
    honest = [
        fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=1.0, eager_ms=2.0, compile_ms=1.5),
        fake_result(P2, _cand("level_1_problem_2_sample_0_kernel.py"), candidate_ms=2.0, eager_ms=2.0, compile_ms=3.0),
    ]
    near_zero = [
        # A second sample of a solved problem: best-of-k would pick it, and its speedup is 10^6.
        _flagged(fake_result(P1, _cand("level_1_problem_1_sample_1_kernel.py"), candidate_ms=2e-6, eager_ms=2.0,
                             compile_ms=1.5), "implausible_speedup", "1000000.0x exceeds the plausibility bound"),
        # A problem with no other sample: it would add a 10^6 factor to the geomean.
        _flagged(fake_result("/kb/KernelBench/level1/3_C.py", _cand("level_1_problem_3_sample_0_kernel.py"),
                             candidate_ms=1e-6, eager_ms=1.0, compile_ms=1.0), "unstable_baseline",
                 "baseline spread 40% between repeats"),
        _flagged(fake_result(P2, _cand("level_1_problem_2_sample_1_kernel.py"), status="violation"),
                 "timing_inconsistent", "timed calls took 0.0001 ms, less than the 0.5 ms its kernels span"),
    ]
    clean = Leaderboard.from_files([write_results(tmp_path / "clean" / "results.jsonl", honest)])
    board = Leaderboard.from_files([write_results(tmp_path / "mixed" / "results.jsonl", honest + near_zero)])

    assert _row(board.summary, level="level1")["flagged for review"] == 3
    assert {k: _row(board.summary, level="level1")[k] for k in HEADLINE} == \
        {k: _row(clean.summary, level="level1")[k] for k in HEADLINE}
    assert board.fast_p.drop(columns="run").equals(clean.fast_p.drop(columns="run"))
    assert list(board.problems["problem"]) == ["1_A.py", "2_B.py"]

    assert sorted(board.flagged["rule"]) == ["implausible_speedup", "timing_inconsistent", "unstable_baseline"]
    row = _row(board.flagged, problem="3_C.py")
    assert row["candidate"] == "level_1_problem_3_sample_0_kernel.py" and row["candidate ms"] == 0.0
    assert row["detail"] == "baseline spread 40% between repeats"

    paths = write_reports(board, tmp_path / "report")
    markdown = paths["markdown"].read_text()
    flagged_section = markdown.split("## Flagged for review", 1)[1].split("##", 1)[0]
    assert flagged_section.count("| mixed |") == 3 and "less than the 0.5 ms its kernels span" in flagged_section
    html = paths["html"].read_text()
    assert "Flagged for review" in html and "baseline spread 40% between repeats" in html


def test_a_board_without_flagged_rows_says_none_under_review(runs):
    board = Leaderboard.from_files([runs[0]])
    assert board.flagged.empty and set(board.summary["flagged for review"]) == {0}
    assert "## Flagged for review\n\n(none)" in to_markdown(board)


def test_a_board_whose_every_row_is_flagged_still_writes_its_reports(tmp_path):
    """On a loaded CPU every baseline can be unstable: the headline tables are empty, the report
    is still written, without the plots that have no rows, and lists the rows for review."""
    flagged = [_flagged(fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=1.0,
                                    eager_ms=2.0, compile_ms=1.5), "unstable_baseline", "eager IQR 45% of its median")]
    board = Leaderboard.from_files([write_results(tmp_path / "run" / "results.jsonl", flagged)])
    assert board.best.empty and len(board.flagged) == 1
    paths = write_reports(board, tmp_path / "report")
    html = paths["html"].read_text()
    assert "eager IQR 45% of its median" in html and "fast_p per level" not in html


def test_the_convention_is_in_the_header_even_when_every_row_is_flagged(tmp_path):
    flagged = [_flagged(fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=1.0,
                                    eager_ms=2.0, compile_ms=1.5), "unstable_baseline", "wide")]
    board = Leaderboard.from_files([write_results(tmp_path / "run" / "results.jsonl", flagged)])
    assert board.convention == "Convention: kernelbench"
    assert "Convention: kernelbench" in to_markdown(board)


def test_a_row_timed_beside_other_work_is_left_for_review(tmp_path):
    honest = [fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=1.0, eager_ms=2.0,
                          compile_ms=1.5)]
    beside = _flagged(fake_result(P2, _cand("level_1_problem_2_sample_0_kernel.py"), candidate_ms=1.0, eager_ms=9.0,
                                  compile_ms=9.0), "timed_beside_other_work",
                      "the eager baseline was timed beside other untimed work still on the device after 30 s, so its "
                      "time may be too long: pid 4321 of another run (cudaagent verify p.py c.py), for 40 s.")
    clean = Leaderboard.from_files([write_results(tmp_path / "clean" / "results.jsonl", honest)])
    board = Leaderboard.from_files([write_results(tmp_path / "mixed" / "results.jsonl", [*honest, beside])])
    assert _row(board.summary, level="level1")["flagged for review"] == 1
    assert {k: _row(board.summary, level="level1")[k] for k in HEADLINE} == \
        {k: _row(clean.summary, level="level1")[k] for k in HEADLINE}
    assert list(board.flagged["rule"]) == ["timed_beside_other_work"]
    # `bench` says at its end why a row is missing from the numbers, with whose work it was.
    from benchmark.commands import flagged_lines

    assert flagged_lines(clean) == []
    (line,) = flagged_lines(board)
    assert line.startswith("1 result(s) left out of the numbers above for review, timed_beside_other_work: ")
    assert "pid 4321 of another run (cudaagent verify p.py c.py)" in line


def test_every_row_counts_in_the_denominators_and_the_harness_errors_are_listed_apart(tmp_path):
    """The problem's failures and ours count as failures of their problem, as the candidates'
    own do: a leaderboard that dropped them would overstate every percentage (issue #38)."""
    path = write_results(tmp_path / "run" / "results.jsonl", [
        fake_result(P1, _cand("level_1_problem_1_sample_0_kernel.py"), candidate_ms=1.0, eager_ms=2.0, compile_ms=1.5),
        fake_result(P2, _cand("level_1_problem_2_sample_0_kernel.py"), status="problem_error"),
        fake_result("/kb/KernelBench/level1/3_C.py", _cand("level_1_problem_3_sample_0_kernel.py"),
                    status="harness_error"),
        fake_result("/kb/KernelBench/level1/4_D.py", _cand("level_1_problem_4_sample_0_kernel.py"),
                    status="build_error"),
    ])
    board = Leaderboard.from_files([path])
    level1 = _row(board.summary, run="run", level="level1")
    assert level1["problems"] == 4 and level1["candidates"] == 4
    assert level1["correct (fast_0) %"] == 25.0 and level1["pass@1 %"] == 25.0
    assert level1["fast_1 vs eager %"] == 25.0
    assert level1["geomean vs eager (all, failures=1x)"] == round(2.0 ** 0.25, 3)
    assert level1["problem errors"] == 1 and level1["harness errors"] == 1
    assert list(board.harness_errors["problem"]) == ["3_C.py"]
    markdown = to_markdown(board)
    assert "## Harness errors" in markdown and "level_1_problem_3_sample_0_kernel.py" in markdown
    # A pair evaluated again (--resume redoes a harness error) counts once, as its last row.
    write_results(path, [fake_result("/kb/KernelBench/level1/3_C.py", _cand("level_1_problem_3_sample_0_kernel.py"),
                                     candidate_ms=1.0, eager_ms=1.0, compile_ms=1.0)])
    redone = _row(Leaderboard.from_files([path]).summary, run="run", level="level1")
    assert redone["candidates"] == 4 and redone["correct (fast_0) %"] == 50.0 and redone["harness errors"] == 0
