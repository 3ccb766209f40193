"""On a GPU: `cudaagent bench` over generated CUDA candidates for the bundled problems, with
the default worker count, baselines, and a resume that evaluates nothing twice."""

from pathlib import Path

import pytest

from benchmark.kernelbench import EXAMPLES_PROBLEMS
from experiments.throughput_templates import variants
from pytest_cudaagent.records.results_file import read_results

from .bench_helpers import run_cli


@pytest.mark.gpu
@pytest.mark.slow
def test_bench_on_gpu_with_cuda_candidates_and_resume(tmp_path, capsys):
    chosen = [v for v in variants(6) if v.problem_stem == "leaky_relu"]  # variants 1, 3 and 5 (wrong)
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    for variant in chosen:
        (candidates / variant.file_name).write_text(variant.source("cuda"))
    arguments = ["bench", "--problems", str(EXAMPLES_PROBLEMS), "--candidates", str(candidates),
                 "--device", "cuda", "--out", str(tmp_path / "out")]
    assert run_cli(arguments) == 0
    results = {Path(r.candidate).name: r for r in read_results(tmp_path / "out" / "results.jsonl")}
    for variant in chosen:
        result = results[variant.file_name]
        assert result.device == "cuda" and result.passed == (not variant.wrong), result.summary()
        if result.passed:
            assert result.speedup_vs_eager and result.speedup_vs_compile and result.env.get("gpu_name")
    # Every candidate is in the leaderboard's count, or listed for review: a baseline timed beside
    # the other GPU tests of this suite (xdist) can be unstable, and a flagged result counts in no
    # number (README, leaderboard).
    leaderboard = (tmp_path / "out" / "leaderboard.md").read_text()
    review = leaderboard.split("## Flagged for review")[1] if "## Flagged for review" in leaderboard else ""
    flagged = {name for name in results if f"| {name} |" in review}
    assert f"| out | examples | 1 | {3 - len(flagged)} |" in leaderboard
    assert all(results[name].passed for name in flagged)
    capsys.readouterr()
    assert run_cli(arguments + ["--resume"]) == 0
    assert "skipped 3 of 3 pair(s) already done" in capsys.readouterr().out
    assert len(read_results(tmp_path / "out" / "results.jsonl")) == 3
