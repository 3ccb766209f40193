"""experiments/eval_side_by_side.py: the table from both sides, and our side for real on
the CPU (KernelBench's side needs CUDA and a checkout: measured on the GPU machine)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.eval_side_by_side import agreement, summarise

REPO = Path(__file__).resolve().parents[2]


def _side(name: str, wall: float, outcomes: dict[str, str], seconds: float, build: float | None = None) -> dict:
    rows = []
    for candidate, outcome in outcomes.items():
        row = {"problem": "/p/problem.py", "candidate": f"/c/{candidate}.py", "outcome": outcome, "seconds": seconds}
        if build is not None:
            row.update(build_s=build, outside_build_s=seconds - build)
        rows.append(row)
    return {"side": name, "workers": 14, "wall_s": wall, "rows": rows}


def test_the_summary_puts_our_wall_against_kernelbenchs_and_splits_our_build():
    sides = {"kernelbench": _side("kernelbench", 300.0, {"a": "correct", "b": "incorrect", "c": "error"}, 40.0),
             "ours": _side("ours", 150.0, {"a": "correct", "b": "correct", "c": "error"}, 33.0, build=30.0)}
    rows = {row["side"]: row for row in summarise(sides)}
    assert rows["ours"]["wall_vs_kernelbench"] == pytest.approx(0.5)
    assert rows["kernelbench"]["wall_vs_kernelbench"] == pytest.approx(1.0)
    assert rows["ours"]["median_build_s"] == 30.0 and rows["ours"]["median_outside_build_s"] == pytest.approx(3.0)
    assert rows["kernelbench"]["median_build_s"] is None  # KernelBench's eval reports no split
    # b: we say correct, KernelBench incorrect; a and c agree (an error is not correct on either side)
    assert agreement(sides) == (2, 3)
    assert agreement({"ours": sides["ours"]}) is None


def test_our_side_runs_on_the_cpu_and_writes_its_json(tmp_path):
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    shutil.copy(REPO / "tests" / "adversarial" / "sandbox_candidates" / "honest_torch.py", candidates)
    work = tmp_path / "work"
    run = subprocess.run([sys.executable, "-m", "experiments.eval_side_by_side", "--sides", "ours",
                          "--device", "cpu", "--workers", "1", "--work", str(work), "--json", str(tmp_path / "s.json"),
                          "--against", str(REPO / "tests" / "data" / "problems" / "small_leaky_relu.py"), str(candidates)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)  # experiments run from the repository root
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    ours = json.loads((work / "ours.json").read_text())
    assert [row["outcome"] for row in ours["rows"]] == ["correct"]
    assert ours["rows"][0]["build_s"] >= 0 and ours["rows"][0]["outside_build_s"] > 0
    # When it began and ended within the side's wall: what the batch spends outside evaluations.
    row = ours["rows"][0]
    assert 0 < row["began_at_s"] < row["ended_at_s"] <= ours["wall_s"] + 0.5
    assert "the first evaluation began about" in run.stdout
    assert row["parent_start_s"] > 0 and row["parent_close_s"] > 0 and row["parent_tampering_s"] >= 0
    assert "median seconds outside the phases: parent.start" in run.stdout
    summary = json.loads((tmp_path / "s.json").read_text())["summary"]
    assert summary[0]["side"] == "ours" and summary[0]["pairs"] == 1 and summary[0]["wall_vs_kernelbench"] is None
    assert "side by side" in run.stdout


def test_kernelbenchs_side_without_a_gpu_says_what_to_do(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    run = subprocess.run([sys.executable, "-m", "experiments.eval_side_by_side", "--sides", "kernelbench",
                          "--work", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert "--sides ours --device cpu" in run.stdout


def test_our_rows_count_the_phases_the_build_overlaps_as_the_build(tmp_path):
    """The candidate builds from its start while the parent waits on the sandbox's report and the
    reference: those waits are build time, and outside it is what follows the build."""
    from experiments.eval_side_by_side import our_rows
    from pytest_cudaagent.core.result import Result
    from pytest_cudaagent.records.results_file import append_result

    result = Result("/k/level2_7_x.py", "/c/level2_7_x.py", status="passed")
    result.phase_seconds = {"sandbox": 1.0, "reference": 4.0, "build": 100.0, "construct": 0.5, "correctness": 2.5}
    result.profile = {"cpu.candidate": 90.0, "cpu.reference": 6.0, "cpu.parent": 1.5, "candidate.forward": 2.0,
                      "cpu.candidate_build": 80.0}
    append_result(tmp_path / "results.jsonl", result)
    [row] = our_rows(tmp_path / "results.jsonl")
    assert row["evaluation_cpu_s"] == pytest.approx(97.5)
    assert (row["cpu_candidate_s"], row["cpu_reference_s"], row["cpu_parent_s"]) == (90.0, 6.0, 1.5)
    from experiments.eval_side_by_side import cpu_by_process

    other = {**row, "cpu_candidate_s": 70.0, "cpu_reference_s": None}
    [by_process] = cpu_by_process({"ours": {"rows": [row, other]}})
    assert by_process["candidate"] == pytest.approx(80.0) and by_process["reference"] == pytest.approx(6.0)
    assert by_process["pairs"] == 2 and cpu_by_process({"kernelbench": {"rows": [row]}}) == []
    assert row["cpu_candidate_build_s"] == 80.0 and by_process["candidate_build"] == pytest.approx(80.0)
    assert summarise({"ours": {"side": "ours", "workers": 1, "wall_s": 110.0, "rows": [row]}})[0]["evaluation_cpu_s"] == \
        pytest.approx(97.5)
    assert row["build_s"] == pytest.approx(105.0) and row["outside_build_s"] == pytest.approx(3.0)
    assert row["seconds"] == pytest.approx(108.0) and row["outcome"] == "correct"
    assert our_rows(tmp_path / "none.jsonl") == []


def test_medians_per_level_from_the_problem_names():
    from experiments.eval_side_by_side import by_level, level_of

    assert level_of("/w/styles/problems/level3_9_ResNet18.py") == "level3" and level_of("/p/small.py") == "other"
    # The identity pairs are named as KernelBench's solutions are: all 32 were one "level" once.
    assert level_of("/tmp/identity/pairs/level2/problems/level_2_problem_36_sample_0_kernel.py") == "level2"
    assert level_of("/x/level_10_problem_1_sample_0_kernel.py") == "level10" and level_of("/x/levels.py") == "other"
    rows = [{"problem": f"/p/level{level}_{n}.py", "candidate": "/c/x.py", "outcome": "correct", "seconds": seconds,
             "build_s": seconds - after, "outside_build_s": after}
            for level, n, seconds, after in [(1, 1, 50.0, 2.0), (1, 2, 60.0, 4.0), (3, 1, 70.0, 9.0)]]
    levels = {row["level"]: row for row in by_level({"ours": {"rows": rows}})}
    assert levels["level1"]["pairs"] == 2 and levels["level1"]["median_outside_build_s"] == pytest.approx(3.0)
    assert levels["level1"]["max_outside_build_s"] == 4.0 and levels["level3"]["median_eval_s"] == 70.0


def test_a_side_cut_at_the_deadline_keeps_what_ended(tmp_path, monkeypatch):
    import argparse
    import threading

    import experiments.eval_side_by_side as side_by_side

    release = threading.Event()

    def slow_side(pairs, checkout, release_name, workers, work, side):
        side["rows"].append({"problem": "/p/a.py", "candidate": "/c/a.py", "outcome": "correct", "seconds": 1.0})
        release.wait(30)  # the second evaluation never ends before the deadline

    monkeypatch.setattr(side_by_side, "run_kernelbench_side", slow_side)
    args = argparse.Namespace(kernelbench=tmp_path, release="v0.1", workers=2, work=tmp_path, deadline=0.5)
    try:
        side = side_by_side.run_side("kernelbench", ["a", "b"], args, console=None)
    finally:
        release.set()
    assert side["finished"] is False and side["pairs_asked"] == 2 and len(side["rows"]) == 1
    assert 0.5 <= side["wall_s"] < 5
    assert summarise({"kernelbench": side})[0]["asked"] == 2
    assert summarise({"kernelbench": side})[0]["wall_vs_kernelbench"] is None  # cut short: no ratio


def test_our_side_takes_an_evaluation_config_for_what_has_no_option(tmp_path, monkeypatch):
    """--our-config: e.g. {"fast_build": true}, the base of the EvalConfig the batch gets whole."""
    import argparse
    import types

    import experiments.eval_side_by_side as side_by_side

    seen = {}

    def batch(pairs, results_path, settings, console=None):
        seen["settings"] = settings  # nothing run: only the settings are looked at
        return types.SimpleNamespace(workers=1, missing=0, log_path=None)

    monkeypatch.setattr(side_by_side, "run_batch", batch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fast.json").write_text('{"fast_build": true}')
    args = argparse.Namespace(release="v0.1", workers=1, work=tmp_path, device="cpu", deadline=30,
                              our_config=Path("fast.json"))
    side = side_by_side.run_side("ours", [], args, console=None)
    assert side["finished"] and side["rows"] == []
    assert seen["settings"].config.fast_build is True  # as `cudaagent bench` runs; --no-fast-build turns it off
    assert (seen["settings"].config.trials, seen["settings"].config.policy) == (side_by_side.TRIALS, "permissive")
    side_by_side.run_side("ours", [], argparse.Namespace(**{**vars(args), "no_fast_build": True}), console=None)
    assert seen["settings"].config.fast_build is True  # the file's {"fast_build": true} still asks for it
    (tmp_path / "fast.json").write_text('{"run_timeout_s": 9.0}')
    side_by_side.run_side("ours", [], argparse.Namespace(**{**vars(args), "no_fast_build": True}), console=None)
    assert seen["settings"].config.fast_build is False and seen["settings"].config.run_timeout_s == 9.0
    assert side_by_side.build_parser().parse_args(["--work", "w", "--our-config", "c.json"]).our_config == Path("c.json")
