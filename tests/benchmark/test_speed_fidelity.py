"""experiments/speed_fidelity.py's repeats (#40): each pair timed several times on each side,
the sides alternating, each side's speedup the median of its runs, with its range beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import speed_fidelity


def test_median_of_runs_takes_each_times_median_and_keeps_the_speedups_range():
    runs = [{"kernelbench_ms": 1.0, "kernelbench_eager_ms": 2.0, "kernelbench_speedup": 2.0},
            {"kernelbench_ms": 1.0, "kernelbench_eager_ms": 3.8, "kernelbench_speedup": 3.8},
            {"kernelbench_ms": 1.2, "kernelbench_eager_ms": 1.2, "kernelbench_speedup": 1.0}]
    row = speed_fidelity.median_of_runs(runs, "kernelbench")
    assert row["kernelbench_speedup"] == 2.0 and row["kernelbench_eager_ms"] == 2.0 and row["kernelbench_ms"] == 1.0
    assert row["kernelbench_speedup_range"] == "1.000-3.800"


def test_a_failed_run_is_the_rows_error():
    runs = [{"ours_ms": 1.0, "ours_eager_ms": 1.0, "ours_speedup": 1.0}, {"error": "ours: wrong"}]
    assert speed_fidelity.median_of_runs(runs, "ours") == {"error": "ours: wrong"}


def test_compare_alternates_the_sides_and_divides_the_medians(monkeypatch):
    order: list[str] = []
    ours = iter([1.0, 1.1, 0.9])
    theirs = iter([3.0, 1.0, 1.05])

    def time_with_ours(problem, candidate, backend, policy):
        order.append("ours")
        return {"ours_ms": 1.0, "ours_eager_ms": 1.0, "ours_speedup": next(ours)}

    def time_with_kernelbench(checkout, problem, candidate, timeout_s):
        order.append("kernelbench")
        return {"kernelbench_ms": 1.0, "kernelbench_eager_ms": 1.0, "kernelbench_speedup": next(theirs)}

    monkeypatch.setattr(speed_fidelity, "time_with_ours", time_with_ours)
    monkeypatch.setattr(speed_fidelity, "time_with_kernelbench", time_with_kernelbench)
    frame = speed_fidelity.compare([(Path("p.py"), Path("c.py"))], Path("kb"), "pytorch-default", 60.0,
                                   repeats=3)
    assert order == ["ours", "kernelbench"] * 3
    row = frame.iloc[0]
    assert row["ours_speedup"] == 1.0 and row["kernelbench_speedup"] == 1.05  # one 3.0 run does not decide
    assert row["ratio"] == pytest.approx(1.0 / 1.05) and not row["outside_band"]


def test_ours_failing_stops_the_pairs_runs(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(speed_fidelity, "time_with_ours",
                        lambda *args: calls.append("ours") or {"error": "ours: failed: wrong"})
    monkeypatch.setattr(speed_fidelity, "time_with_kernelbench", lambda *args: calls.append("kernelbench") or {})
    frame = speed_fidelity.compare([(Path("p.py"), Path("c.py"))], Path("kb"), "pytorch-default", 60.0, repeats=3)
    assert calls == ["ours"] and frame.iloc[0]["error"] == "ours: failed: wrong"


def test_repeats_below_one_is_refused():
    with pytest.raises(SystemExit) as stop:
        speed_fidelity.main(["--kernelbench", "kb", "--repeats", "0"])
    assert stop.value.code == 2
