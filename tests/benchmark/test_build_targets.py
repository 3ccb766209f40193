"""#15's report: both tables from their JSON, each beside its target."""

import json

from experiments import build_targets


def record(name, plain, fast, verdict="passed", fast_verdict=None):
    return {"candidate": name, "plain build s": plain, "plain verdict": verdict,
            "all build s": fast, "all verdict": fast_verdict or verdict}


def test_build_rows_group_bundled_and_fresh_and_leave_out_cut_runs():
    records = [record("leaky_relu", 40.0, 20.0), record("row_sum", 42.0, 21.0),
               record("level1_1_x", 80.0, 16.0), record("level2_3_y", 90.0, 18.0, fast_verdict="incorrect"),
               {"candidate": "level3_1_z", "plain build s": 85.0, "plain verdict": "passed"}]  # no fast build
    rows = {row["candidates"]: row for row in build_targets.build_rows(records)}
    assert rows["bundled"]["count"] == 2 and rows["bundled"]["median speedup"] == 2.0
    assert rows["fresh"]["count"] == 2 and rows["fresh"]["median speedup"] == 5.0
    assert rows["all"]["count"] == 4 and rows["all"]["median speedup"] == 3.5
    assert rows["all"]["same verdicts"] == 3 and rows["all"]["range"] == (2.0, 5.0)


def test_the_command_prints_both_tables_and_says_whether_each_target_is_met(tmp_path, capsys):
    builds = tmp_path / "builds.json"
    builds.write_text(json.dumps([record("leaky_relu", 40.0, 10.0), record("level1_1_x", 80.0, 16.0)]))
    throughput = tmp_path / "throughput.json"
    report = {"harness_wall_s": 90.7, "sequential_wall_s": 728.8, "speedup": 8.03, "identical_verdicts": True,
              "workers": 12, "candidates": [{"same_verdict": True}] * 20}
    throughput.write_text(json.dumps(report))
    assert build_targets.main(["--builds", str(builds), "--throughput", str(throughput)]) == 0
    out = capsys.readouterr().out
    assert "cold builds" in out and "20 fresh candidates end to end" in out
    assert "8.03x" in out and "20/20" in out and "not met" not in out
    throughput.write_text(json.dumps({**report, "speedup": 5.77, "harness_wall_s": 139.3}))
    assert build_targets.main(["--builds", str(builds), "--throughput", str(throughput)]) == 1
    assert "not met" in capsys.readouterr().out
    assert build_targets.main(["--builds", str(tmp_path / "missing.json")]) == 2
