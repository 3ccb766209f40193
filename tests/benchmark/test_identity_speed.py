"""The identity-speed benchmark's plumbing (experiments/identity_speed.py): which pairs it
makes, the bench commands it runs (separate caches, the calibration policy), and the arithmetic of
its report. The speeds themselves are measured on the GPU, never asserted here."""

import json
import statistics
from pathlib import Path

from experiments import identity_speed
from experiments.identity_speed import (
    BAND,
    bench_command,
    bench_speedups,
    cpu_table,
    distribution,
    kernelbench_speedups,
    main,
    pooled_medians,
    quantile_ratios,
    rounds_ratio,
    rows_read_by,
    summarise,
)

from .bench_helpers import fake_result, make_kernelbench_tree, write_results


def test_the_distribution_reads_median_percentiles_and_the_share_in_band():
    speedups = [0.5, *([1.0] * 18), 2.0]
    stats = distribution(speedups, BAND)
    assert stats["n"] == 20 and stats["median"] == 1.0
    assert stats["p5"] == 1.0 and stats["p95"] == 1.0  # one outlier at each end of twenty
    assert stats["within_band"] == 0.9
    assert abs(stats["geomean"] - 1.0) < 1e-9
    assert distribution([], BAND) == {"n": 0}


def test_make_writes_the_subset_and_the_selection(tmp_path):
    tree = make_kernelbench_tree(tmp_path / "kb")
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps({"made_with": "test", "pairs": [["1", 2, 0.1], ["2", 1, 0.1]]}))
    assert main(["make", "--kernelbench", str(tree), "--out", str(tmp_path / "run"), "--subset", str(subset)]) == 0
    names = sorted(path.name for path in (tmp_path / "run" / "candidates").iterdir())
    assert names == ["level_1_problem_2_sample_0_kernel.py", "level_2_problem_1_sample_0_kernel.py"]
    selection = json.loads((tmp_path / "run" / "selection.json").read_text())
    assert [(row["level"], row["problem_id"]) for row in selection] == [("1", 2), ("2", 1)]
    assert "class ModelNew" in Path(selection[0]["candidate"]).read_text()


def test_make_writes_pair_directories_per_level_that_pair_each_candidate_with_its_problem(tmp_path):
    """pairs/level<N>/{problems,candidates}: what `--pairs` of phase_profile and eval_side_by_side
    takes (#41's pure-PyTorch candidates at KernelBench's sizes)."""
    from pytest_cudaagent.records.pairing import pair_directory

    tree = make_kernelbench_tree(tmp_path / "kb")
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps({"made_with": "test", "pairs": [["1", 2, 0.1], ["2", 1, 0.1]]}))
    assert main(["make", "--kernelbench", str(tree), "--out", str(tmp_path / "run"), "--subset", str(subset)]) == 0
    selection = json.loads((tmp_path / "run" / "selection.json").read_text())
    for row in selection:
        level_dir = tmp_path / "run" / "pairs" / f"level{row['level']}"
        pairs = pair_directory(level_dir / "problems", level_dir / "candidates")
        assert len(pairs) == 1
        assert pairs[0].problem.read_text() == Path(row["problem"]).read_text()
        assert pairs[0].candidate.read_text() == Path(row["candidate"]).read_text()


def test_the_committed_subsets_name_pairs_of_each_level():
    pairs = json.loads(identity_speed.SUBSET.read_text())["pairs"]
    assert {level for level, _, _ in pairs} == {"1", "2", "3"}
    assert all(mib is not None and mib <= 256 for _, _, mib in pairs)
    small = json.loads(identity_speed.SUBSET.with_name("identity_subset_small.json").read_text())["pairs"]
    assert len(small) == 30 and all(pair in pairs for pair in small)


def test_alone_and_batched_run_bench_with_caches_of_their_own(tmp_path):
    args = identity_speed.argparse.Namespace(out=str(tmp_path), kernelbench="kb", level="1,2,3", device="cuda",
                                             workers=None, timing_rounds=None)
    alone, alone_env = bench_command(args, "alone")
    batched, batched_env = bench_command(args, "batched")
    assert alone[alone.index("--workers") + 1] == "1" and "--workers" not in batched
    for command in (alone, batched):
        assert command[command.index("--policy") + 1] == "calibration"
        assert command[command.index("--baselines") + 1] == "eager" and "--resume" in command
    # Batched eager times are measured in the batch, not read from the alone run's cache.
    assert alone_env["CUDAAGENT_CACHE"] != batched_env["CUDAAGENT_CACHE"]


def test_timing_rounds_reach_the_bench_command_when_given(tmp_path):
    args = identity_speed.argparse.Namespace(out=str(tmp_path), kernelbench="kb", level="3", device="cuda",
                                             workers=None, timing_rounds=4)
    command, _ = bench_command(args, "alone")
    assert command[command.index("--timing-rounds") + 1] == "4"
    args.timing_rounds = None
    assert "--timing-rounds" not in bench_command(args, "alone")[0]


def test_the_report_puts_the_three_timings_side_by_side_per_level(tmp_path):
    problem = str(tmp_path / "KernelBench" / "level1" / "1_A.py")
    other = str(tmp_path / "KernelBench" / "level2" / "1_B.py")
    results = write_results(tmp_path / "results.jsonl", [
        fake_result(problem, "level_1_problem_1_sample_0_kernel.py", candidate_ms=1.0, eager_ms=1.01, compile_ms=None),
        fake_result(other, "level_2_problem_1_sample_0_kernel.py", candidate_ms=1.0, eager_ms=0.5, compile_ms=None),
        fake_result(other, "level_2_problem_2_sample_0_kernel.py", status="incorrect")])
    rows = bench_speedups(results)
    assert [row["level"] for row in rows] == ["1", "2", "2"]
    assert rows[2]["speedup"] is None
    kernelbench = tmp_path / "kernelbench.jsonl"
    kernelbench.write_text(json.dumps({"level": "1", "candidate": "c1", "kernelbench_speedup": 1.0,
                                       "kernelbench_ms": 0.1, "kernelbench_eager_ms": 0.1}) + "\n"
                           + json.dumps({"level": "2", "candidate": "c2", "error": "rejected"}) + "\n")
    summary = summarise({"alone": rows, "kernelbench": kernelbench_speedups(kernelbench)}, BAND)
    assert summary["1"]["alone"]["median"] == 1.01 and summary["1"]["alone"]["within_band"] == 1.0
    assert summary["2"]["alone"]["pairs"] == 2 and summary["2"]["alone"]["not_passed"] == 1
    assert summary["2"]["alone"]["within_band"] == 0.0  # 0.5x
    assert summary["2"]["kernelbench"]["not_passed"] == 1 and summary["2"]["kernelbench"]["n"] == 0
    assert summary["all"]["alone"]["n"] == 2


def test_rows_timed_in_rounds_are_reported_again_with_their_pooled_medians(tmp_path):
    """The report shows, for the rows timed in rounds only, the pooled medians' ratio and the
    median of the rounds' ratios beside the Result's speedup (the lower deciles' ratio)."""
    problem = str(tmp_path / "KernelBench" / "level3" / "1_A.py")
    in_rounds = fake_result(problem, "level_3_problem_1_sample_0_kernel.py", candidate_ms=1.0, eager_ms=1.5,
                            compile_ms=None)
    in_rounds.timing_rounds = [{"candidate_ms": 1.0, "eager_ms": 1.0}, {"candidate_ms": 1.5, "eager_ms": 1.5},
                               {"candidate_ms": 1.0, "eager_ms": 1.5}]
    in_rounds.speedup_vs_eager = 1.0
    one_round = fake_result(problem, "level_3_problem_2_sample_0_kernel.py", candidate_ms=1.0, eager_ms=1.0,
                            compile_ms=None)
    rows = bench_speedups(write_results(tmp_path / "results.jsonl", [in_rounds, one_round]))
    assert [row["speedup"] for row in rows] == [1.0, 1.0] and [row["rounds"] for row in rows] == [3, 0]
    pooled = rows_read_by(rows, pooled_medians)
    assert len(pooled) == 1 and pooled[0]["speedup"] == 1.5
    paired = rows_read_by(rows, rounds_ratio)
    assert len(paired) == 1 and paired[0]["speedup"] == 1.0  # ratios 1.0, 1.0, 1.5
    assert rows_read_by(rows, quantile_ratios)[0]["speedup"] is None  # this result kept no samples


def test_quantile_ratios_read_the_same_code_on_a_two_level_host_as_one():
    """The fast level (18 ms against 27) in three of the candidate's forty calls and one of
    eager's: the lower deciles read 1.35x, the deciles' median ratio 1.0."""
    candidate = [18.0] * 4 + [27.0] * 36
    eager = [18.0] * 1 + [27.0] * 39
    row = {"speedup": 1.0, "candidate_samples": candidate, "eager_samples": eager}
    lower_deciles = statistics.quantiles(eager, n=10)[0] / statistics.quantiles(candidate, n=10)[0]
    assert lower_deciles > 1.3
    assert quantile_ratios(row) == 1.0
    # A candidate twice as fast on every call reads 2.0 whichever level each call met.
    halved = {"speedup": 1.0, "candidate_samples": [sample / 2 for sample in eager], "eager_samples": eager}
    assert quantile_ratios(halved) == 2.0


def test_bench_rows_pool_each_rounds_samples(tmp_path):
    problem = str(tmp_path / "KernelBench" / "level3" / "1_A.py")
    result = fake_result(problem, "level_3_problem_1_sample_0_kernel.py", candidate_ms=1.0, eager_ms=1.0,
                         compile_ms=None)
    result.timing_rounds = [{"candidate_ms": 1.0, "eager_ms": 1.0, "candidate_samples_ms": [1.0, 1.0],
                             "eager_samples_ms": [1.0]},
                            {"candidate_ms": 2.0, "eager_ms": 2.0, "candidate_samples_ms": [2.0],
                             "eager_samples_ms": [2.0, 2.0]}]
    [row] = bench_speedups(write_results(tmp_path / "results.jsonl", [result]))
    assert row["candidate_samples"] == [1.0, 1.0, 2.0] and row["eager_samples"] == [1.0, 2.0, 2.0]
    assert quantile_ratios(row) > 1.0  # eager's pooled samples are the slower


def test_the_cpu_table_takes_the_median_of_the_repeats():
    row = {"level": "custom", "status": "passed", "candidate_ms": 1.0, "eager_ms": 1.0, "unstable": False}
    runs = [[{**row, "candidate": "data__small.py", "speedup": speedup}] for speedup in (0.5, 1.02, 1.05)]
    table = cpu_table(runs, {"data__small": "data"})
    [problem] = table["problems"]
    assert problem["problem"] == "small" and problem["from"] == "data"
    assert problem["median"] == 1.02 and problem["within"]
    assert table["within"] == 1 and table["timed"] == 1


def test_each_cpu_repeat_runs_with_a_fresh_cache_of_its_own(tmp_path, monkeypatch):
    """Each repeat's eager times are its own: the batch is given the repeat's cache in its config
    (the environment variable, set after the config was made, was read by nothing, and the
    repeats shared the user's cache)."""
    seen = []

    def fake_run_batch(pairs, results, settings, resume, console):
        seen.append(Path(settings.config.cache_dir))
        (settings.config.cache_dir / "baselines").mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(identity_speed, "run_batch", fake_run_batch)
    monkeypatch.setenv("CUDAAGENT_CACHE", str(tmp_path / "users-cache"))
    stale = tmp_path / "out" / "cache-1" / "baselines"
    stale.mkdir(parents=True)
    (stale / "old.json").write_text("{}")
    main(["cpu", "--out", str(tmp_path / "out"), "--repeats", "2", "--name", "small_leaky_relu.py", "--quiet"])
    assert seen == [tmp_path / "out" / "cache-0", tmp_path / "out" / "cache-1"]
    assert not (stale / "old.json").exists()  # a repeat starts from an empty cache
