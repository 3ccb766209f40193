"""experiments/under_load.py: the pairs it writes, its estimate, and its report on bench
output directories (made here from Results as the evaluator writes them)."""

from __future__ import annotations

import json
from pathlib import Path

from experiments import under_load
from experiments.under_load import GIB, Run, estimate_seconds, prepare, report

from .bench_helpers import fake_result, write_results


def test_the_estimate_knows_a_reference_killed_at_the_host_cap():
    seconds, fate = estimate_seconds(int(0.1 * GIB))
    assert fate == "runs" and under_load.FIXED_S < seconds < under_load.FIXED_S + 5
    assert estimate_seconds(6 * GIB)[1] == "host cap"  # 8 sets of 6 GiB held: past 32 GiB
    assert estimate_seconds(6 * GIB, timing=False)[1] == "runs"  # 5 sets: 30 GiB


def test_prepare_writes_the_large_cases_as_their_own_candidates(tmp_path):
    plan = prepare(None, [], tmp_path, None, large_samples=3)
    cases = sorted(path.stem for path in under_load.CASES.glob("*.py"))
    assert [row["problem"] for row in plan["large"]] == [f"{case}.py" for case in cases]
    samples = {row["problem"]: row["samples"] for row in plan["large"]}
    assert samples["relu_1g.py"] == 2 and samples["attention_32k.py"] == 3
    candidate = (tmp_path / "large" / "candidates" / "attention_32k_sample_2.py").read_text()
    assert "class ModelNew(nn.Module)" in candidate and "class Model(" not in candidate
    assert sorted(path.name for path in (tmp_path / "large" / "one").iterdir()) == [
        f"{case}_sample_0.py" for case in cases]
    assert json.loads((tmp_path / "plan.json").read_text()) == plan


def bench_dir(root: Path, name: str, results: list, planned: list[tuple[str, str]], command: str,
              tail: str) -> Path:
    directory = root / name
    write_results(directory / "results.jsonl", results)
    (directory / ".bench-run").mkdir(parents=True)
    (directory / ".bench-run" / "pairs.json").write_text(json.dumps(
        [{"problem": f"/p/{problem}", "candidate": f"/c/{candidate}", "sample": 0} for problem, candidate in planned]))
    (directory / "pytest.log").write_text(f"{command}\n...\n{tail}\n")
    return directory


def test_the_report_counts_rows_faults_retries_and_verdicts_against_the_baseline(tmp_path):
    a, b, c, d = (("a.py", "a_sample_0.py"), ("b.py", "b_sample_0.py"), ("c.py", "c_sample_0.py"),
                  ("d.py", "d_sample_0.py"))
    alone = bench_dir(tmp_path, "alone", [
        fake_result(f"/p/{problem}", f"/c/{candidate}") for problem, candidate in (a, b, c, d)],
        [a, b, c, d], "python -m pytest -n 1 --cudaagent-memory-policy admit", "4 passed in 60.5s (0:01:00)")
    retried = fake_result("/p/a.py", "/c/a_sample_0.py")
    retried.env["retried"] = {"why": "out of memory while 3 other evaluation(s) shared the device: ...",
                              "first": "runtime_error: ...", "waited_alone_s": 4.0}
    retried.env["memory"] = {"policy": "retry", "waited_s": 4.0}
    out_of_memory = fake_result("/p/b.py", "/c/b_sample_0.py", status="runtime_error")
    out_of_memory.error = "forward failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    another_sample = fake_result("/p/a.py", "/c/a_sample_1.py")  # not run alone: matched by its problem
    loaded = bench_dir(tmp_path, "loaded", [
        retried, out_of_memory, fake_result("/p/c.py", "/c/c_sample_0.py", status="harness_error"),
        fake_result("/p/c.py", "/c/c_sample_0.py"), another_sample],
        [a, b, c, d, ("a.py", "a_sample_1.py")], "python -m pytest -n 16 --cudaagent-memory-policy retry",
        "1 failed, 3 passed in 20.25s")
    found = report([Run.read("alone", alone), Run.read("loaded", loaded)])
    first, second = found["runs"]
    assert (first["workers"], first["memory policy"], first["wall s"], first["passed"]) == (1, "admit", 60.5, 4)
    assert (second["workers"], second["memory policy"], second["wall s"]) == (16, "retry", 20.25)
    assert second["rows"] == 5 and second["pairs"] == 4
    assert second["pairs without a row"] == 1  # d
    assert second["pairs with more than one row"] == 1  # c: a harness error, then redone
    assert second["harness errors"] == 0 and second["candidate's failures"] == 1  # c's last row passed
    assert second["out-of-memory verdicts"] == 1 and second["retried for memory"] == 1
    assert found["against the baseline"] == [{"run": "loaded", "against": "alone", "compared": 4, "same verdict": 3,
                                             "different": 1, "matched by problem": 1}]
    assert [(row["problem"], row["alone"], row["loaded"]) for row in found["differences"]] == [
        ("b.py", "passed", "runtime_error")]
    assert under_load.main(["report", f"alone={alone}", f"loaded={loaded}", "--markdown",
                            "--json", str(tmp_path / "report.json")]) == 0
    assert json.loads((tmp_path / "report.json").read_text()) == found


def test_a_run_cut_at_its_time_limit_reports_the_limit_and_says_so(tmp_path):
    cut = bench_dir(tmp_path, "cut", [fake_result("/p/a.py", "/c/a_sample_0.py")],
                    [("a.py", "a_sample_0.py"), ("b.py", "b_sample_0.py")], "python -m pytest -n 16", "")
    (cut / "wall.txt").write_text("270 124\n")
    summary = report([Run.read("cut", cut)])["runs"][0]
    assert (summary["wall s"], summary["cut"], summary["pairs without a row"]) == (270.0, True, 1)


def test_the_rows_of_one_unsharded_bench_go_to_the_shard_that_holds_their_problem(tmp_path, capsys):
    """identity-gpus resumes each shard from identity-all's rows: every row lands in exactly one
    shard, the one `bench --shard` gives its problem."""
    from benchmark.shards import problem_key, shard_of
    from experiments.under_load import main, rows_of_shard

    names = [("level1", f"{number}_Problem.py") for number in range(1, 30)] + [("level3", "5_Model.py")]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps({"problem": f"/anywhere/KernelBench/{level}/{name}", "candidate": "c.py"}) + "\n"
                               for level, name in names))
    shards = [rows_of_shard(results, f"{index}/3") for index in range(3)]
    assert sorted(line for shard in shards for line in shard) == sorted(results.read_text().splitlines(keepends=True))
    for index, shard in enumerate(shards):
        assert shard, "30 problems over 3 shards: none empty"
        for line in shard:
            problem = Path(json.loads(line)["problem"])
            assert shard_of(problem_key(problem.parent.name, problem.name), 3) == index
    assert main(["rows-of-shard", str(results), "1/3"]) == 0
    assert capsys.readouterr().out == "".join(shards[1])
