"""The batch timeline (experiments/harness_timeline.py): Results' arrivals watched as the
file grows, each evaluation's phases laid back from its arrival in the order they ran, the timing
lock's holds, the facts and the plot."""

import json
import time

from experiments import harness_timeline
from experiments.harness_timeline import ArrivalWatch, lanes, lock_holds, summary

from .bench_helpers import fake_result


def test_arrivals_are_recorded_as_lines_appear(tmp_path):
    results = tmp_path / "results.jsonl"
    began = time.perf_counter()
    with ArrivalWatch(results, began, poll_s=0.01) as watch:
        time.sleep(0.05)
        results.write_text(fake_result("/p/a.py", "/c/a_1.py").to_json() + "\n")
        time.sleep(0.1)
        with open(results, "a") as handle:
            handle.write(fake_result("/p/a.py", "/c/a_2.py").to_json() + "\n")
    names = [entry["candidate"] for entry in watch.arrivals]
    assert names == ["a_1.py", "a_2.py"]
    assert 0 < watch.arrivals[0]["arrived_s"] <= watch.arrivals[1]["arrived_s"]


def test_phases_are_laid_back_from_the_arrival_in_the_order_they_ran():
    result = fake_result("/p/a.py", "/c/a_1.py")
    result.phase_seconds = {"sandbox": 1.0, "build": 10.0, "correctness": 2.0, "timing": 1.0}
    result.profile = {"parent.start": 0.5, "parent.close": 0.25, "parent.tampering": 0.25}
    later = fake_result("/p/a.py", "/c/a_2.py")
    later.phase_seconds = {"build": 1.0}
    (lane_a, lane_b) = lanes([later, result], [{"candidate": "a_1.py", "arrived_s": 20.0},
                                               {"candidate": "a_2.py", "arrived_s": 30.0}])
    assert lane_a.candidate == "a_1.py"  # sorted by start
    assert [phase for phase, _, _ in lane_a.segments] == ["start", "sandbox", "build", "correctness", "timing", "close"]
    assert lane_a.started_s == 20.0 - 15.0
    phase, start, seconds = lane_a.segments[2]
    assert (phase, start, seconds) == ("build", 6.5, 10.0)
    assert lane_a.segments[-1][1] + lane_a.segments[-1][2] == 20.0
    assert lane_b.started_s == 29.0


def test_a_worker_started_ahead_is_drawn_before_its_evaluation():
    result = fake_result("/p/a.py", "/c/a_2.py")
    result.phase_seconds = {"sandbox": 0.5, "build": 1.5, "correctness": 2.0}
    result.env["started_ahead_s"] = 12.0
    (lane,) = lanes([result], [{"candidate": "a_2.py", "arrived_s": 50.0}])
    assert [phase for phase, _, _ in lane.segments] == ["ahead", "start", "sandbox", "build", "correctness", "close"]
    assert lane.segments[0] == ("ahead", 34.0, 12.0)  # it ends where its evaluation starts
    assert lane.started_s == 46.0 and lane.ahead_s == 12.0


def test_lock_holds_and_facts(tmp_path):
    log = tmp_path / "locks.log"
    began_ns = 1_000_000_000_000
    log.write_text(f"gpu-x 12-ab {began_ns + 2_000_000_000} {began_ns + 3_000_000_000}\n"
                   f"gpu-x 13-cd {began_ns + 5_000_000_000} {began_ns + 5_500_000_000}\nnot a hold\n")
    holds = lock_holds(log, began_ns)
    assert holds == [(2.0, 1.0), (5.0, 0.5)]
    assert lock_holds(tmp_path / "missing.log", began_ns) == []
    result = fake_result("/p/a.py", "/c/a_1.py")
    result.phase_seconds = {"build": 4.0}
    facts = summary(lanes([result], [{"candidate": "a_1.py", "arrived_s": 9.0}]), holds, 10.0)
    assert facts["first_evaluation_started_s"] == 5.0 and facts["last_result_s"] == 9.0
    assert facts["after_last_result_s"] == 1.0 and facts["timing_lock_held_s"] == 1.5
    assert facts["timing_lock_busy_share"] == 0.15


def test_the_command_prints_the_tables_and_draws_the_plot(tmp_path, capsys):
    (tmp_path / "harness").mkdir()
    result = fake_result("/p/a.py", "/c/a_1.py")
    result.phase_seconds = {"build": 4.0, "correctness": 1.0}
    (tmp_path / "harness" / "results.jsonl").write_text(result.to_json() + "\n")
    (tmp_path / harness_timeline.ARRIVALS_FILE).write_text(json.dumps(
        {"began_unix_ns": 0, "wall_s": 7.0, "arrivals": [{"candidate": "a_1.py", "arrived_s": 6.0}]}))
    assert harness_timeline.main([str(tmp_path), "--plot", str(tmp_path / "t.png"), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "a_1.py" in out and "first_evaluation_started_s" in out
    assert (tmp_path / "t.png").stat().st_size > 0
    assert json.loads((tmp_path / "t.json").read_text())["facts"]["wall_s"] == 7.0
    assert harness_timeline.main([str(tmp_path / "nowhere")]) == 2
