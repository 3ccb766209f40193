"""`cudaagent baselines`: statistics, KernelBench-shaped JSON, comparison, and a real CPU run."""

import json

import pytest

from benchmark.baselines import (
    BaselineStats,
    ProblemBaselines,
    compare,
    geomean_ratio,
    mode_of_file,
    to_json_record,
)
from benchmark.kernelbench import Problem
from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.timing.baseline_cache import BaselineCache

from .bench_helpers import make_kernelbench_tree, run_cli


def test_stats_from_samples_match_kernelbench_fields():
    stats = BaselineStats.from_samples([1.0, 2.0, 3.0, 10.0], "H100", "cuda")
    assert (stats.mean, stats.min, stats.max, stats.median, stats.num_trials) == (4.0, 1.0, 10.0, 2.5, 4)
    assert stats.std == pytest.approx(4.0825, abs=1e-3)


def _found(level: str, name: str, eager_mean: float, error=None) -> ProblemBaselines:
    stats = {} if error else {"eager": BaselineStats(eager_mean, 0.0, eager_mean, eager_mean, eager_mean, 10, "cpu-x", "cpu")}
    return ProblemBaselines(Problem(level, 1, __import__("pathlib").Path(f"/kb/level{level}/{name}")), stats, error)


def test_record_is_keyed_by_mode_level_and_file_and_merges_earlier_runs():
    config = EvalConfig(device="cpu")
    first = to_json_record([_found("1", "1_A.py", 2.0), _found("2", "1_B.py", 0, error="boom")], "cpu", config)
    assert first["eager"]["level1"]["1_A.py"]["mean"] == 2.0
    assert first["errors"] == {"level2": {"1_B.py": "boom"}}
    assert {"hardware", "torch", "date", "timing_config"} <= set(first["meta"])
    merged = to_json_record([_found("2", "1_B.py", 3.0)], "cpu", config, json.loads(json.dumps(first)))
    assert merged["eager"]["level1"]["1_A.py"]["mean"] == 2.0 and merged["eager"]["level2"]["1_B.py"]["mean"] == 3.0
    assert merged["errors"]["level2"] == {}


def test_compare_with_kernelbench_file_infers_its_mode(tmp_path):
    ours = {"eager": {"level1": {"1_A.py": {"mean": 2.0}, "2_B.py": {"mean": 1.0}}},
            "compile": {"level1": {"1_A.py": {"mean": 1.0}}}}
    theirs = tmp_path / "H100_Modal_baseline_time_torch_compile_inductor_default.json"
    theirs.write_text(json.dumps({"level1": {"1_A.py": {"mean": 4.0}, "9_Z.py": {"mean": 1.0}}}))
    assert mode_of_file(theirs) == "compile" and mode_of_file(tmp_path / "baseline_time_torch.json") == "eager"
    table = compare(ours, theirs)
    assert table.to_dict("records") == [
        {"mode": "compile", "level": "level1", "problem": "1_A.py", "ours ms": 1.0, "theirs ms": 4.0, "ratio": 0.25}]
    assert compare(ours, theirs, mode="eager")["ratio"].tolist() == [0.5]
    assert geomean_ratio(compare(ours, theirs))["geomean_ratio"].tolist() == [0.25]


def test_published_kernelbench_file_is_read_by_level_and_name():
    published = "/work/shared/kernelbench-baselines/H100_Modal_baseline_time_torch.json"
    if not __import__("os").path.exists(published):
        pytest.skip("KernelBench's published baseline files are not on this machine")
    ours = {"eager": {"level1": {"1_Square_matrix_multiplication_.py": {"mean": 5.32}}}}
    assert compare(ours, published)["ratio"].tolist() == [2.0]


@pytest.mark.slow
def test_baselines_command_times_eager_on_cpu_and_fills_the_cache(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CUDAAGENT_CACHE", str(cache))
    make_kernelbench_tree(tmp_path / "kb")
    theirs = tmp_path / "baseline_time_torch.json"
    theirs.write_text(json.dumps({"level2": {"1_Tiny_relu_add.py": {"mean": 1000.0}}}))
    out = tmp_path / "baselines.json"
    code = run_cli(["baselines", "--kernelbench", str(tmp_path / "kb"), "--level", "2", "--modes", "eager",
                    "--device", "cpu", "--out", str(out), "--compare", str(theirs)])
    assert code == 0
    record = json.loads(out.read_text())
    stats = record["eager"]["level2"]["1_Tiny_relu_add.py"]
    assert stats["num_trials"] >= 10 and stats["min"] <= stats["median"] <= stats["max"]
    assert list(record["eager"]) == ["level2"]  # --level 2 only
    assert "1_Tiny_relu_add.py" in capsys.readouterr().out  # the comparison table
    problem = tmp_path / "kb" / "KernelBench" / "level2" / "1_Tiny_relu_add.py"
    records = [json.loads(path.read_text()) for path in (cache / "baselines").glob("*.json")]
    record = next(record for record in records if record["problem"] == str(problem) and record["mode"] == "eager")
    cached = BaselineCache(cache)
    key = cached.key(problem, "cpu", "eager", EvalConfig().timing_config, "kernelbench", record["backend_settings"])
    assert cached.get(key) is not None


def test_baselines_command_refuses_unknown_modes(tmp_path, capsys):
    assert run_cli(["baselines", "--modes", "eager,fastest", "--out", str(tmp_path / "b.json")]) == 2
    assert "unknown baseline" in capsys.readouterr().err
