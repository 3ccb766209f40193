"""The throughput benchmark's pieces: generated candidates, the KernelBench-style sequential loop
and the verdict comparison (the full benchmark runs on the GPU machine)."""

import ast
import hashlib

from rich.console import Console

from benchmark.kernelbench import EXAMPLES_PROBLEMS, load_flat
from benchmark.solutions import pair_solutions
from experiments.harness_throughput import compare_runs, fresh_cache_env, sequential_eval
from experiments.throughput_templates import variants, write_candidates
from pytest_cudaagent.core.files import check_candidate

from .bench_helpers import PROBLEM, fake_result, write_candidate


def test_twenty_distinct_candidates_for_the_bundled_problems_some_wrong(tmp_path):
    for device in ("cuda", "cpu"):
        chosen = write_candidates(tmp_path / device, device, 20)
        sources = [(tmp_path / device / v.file_name).read_text() for v in chosen]
        assert len({hashlib.sha256(s.encode()).hexdigest() for s in sources}) == 20
        for variant, source in zip(chosen, sources, strict=True):
            ast.parse(source)
            check_candidate(tmp_path / device / variant.file_name)
            assert f"throughput_{variant.problem_stem}_{device}_{variant.variant}" in source
        pairs = pair_solutions(load_flat(EXAMPLES_PROBLEMS), tmp_path / device).pairs
        assert len(pairs) == 20 and {p.problem.stem for p in pairs} == {"leaky_relu", "row_sum"}
    assert 2 <= sum(v.wrong for v in variants(20)) <= 5
    assert "<<<" in variants(1)[0].source("cuda") and "<<<" not in variants(1)[0].source("cpu")


def test_sequential_loop_gives_kernelbench_verdicts(tmp_path):
    problem = tmp_path / "tiny.py"
    problem.write_text(PROBLEM.format(expression="torch.relu(x)"))
    right = sequential_eval(problem, write_candidate(tmp_path / "right.py", "x.clamp_min(0)"), "cpu")
    assert right["verdict"] == "correct" and right["candidate_ms"] > 0
    assert set(right["seconds"]) == {"build", "correctness", "timing"}
    assert sequential_eval(problem, write_candidate(tmp_path / "wrong.py", "x.abs()"), "cpu")["verdict"] == "incorrect"
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('nvcc failed')\nclass ModelNew: pass\n")
    assert sequential_eval(problem, broken, "cpu")["verdict"] == "build_error"


def test_comparison_flags_any_verdict_that_differs(tmp_path):
    chosen = variants(2)
    harness = [fake_result("/p/leaky_relu.py", f"/c/{chosen[0].file_name}"),
               fake_result("/p/row_sum.py", f"/c/{chosen[1].file_name}", status="incorrect")]
    sequential = {"candidates": [{"candidate": f"/c/{chosen[0].file_name}", "verdict": "correct", "seconds": {"build": 2.0}},
                                 {"candidate": f"/c/{chosen[1].file_name}", "verdict": "correct", "seconds": {}}],
                  "baselines": {"leaky_relu.py": {"seconds": 3.0}}}
    report = compare_runs(chosen, harness, sequential, 10.0, 30.0, 2, Console(file=open(tmp_path / "log", "w")))
    assert report["speedup"] == 3.0 and report["identical_verdicts"] is False
    assert [row["same_verdict"] for row in report["candidates"]] == [True, False]
    assert report["sequential_phase_totals_s"]["baselines"] == 3.0


def test_fresh_caches_are_empty_directories(tmp_path):
    env = fresh_cache_env(tmp_path)
    assert set(env) == {"CUDAAGENT_CACHE", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    assert all(not any((tmp_path / path).iterdir()) for path in env.values())


def test_phases_share_one_work_directory(tmp_path, capsys):
    from experiments.harness_throughput import (
        load_or_write_candidates,
        load_walls,
        main,
        save_wall,
    )

    first = load_or_write_candidates(tmp_path, "cpu", 4)
    (tmp_path / "candidates" / first[0].file_name).write_text("# edited\n")
    again = load_or_write_candidates(tmp_path, "cpu", 20)  # the listing wins over a new count
    assert again == first and (tmp_path / "candidates" / first[0].file_name).read_text() == "# edited\n"
    save_wall(tmp_path, "harness", 12.5, workers=3)
    save_wall(tmp_path, "sequential", 40.0)
    assert load_walls(tmp_path) == {"harness": {"wall_s": 12.5, "workers": 3}, "sequential": {"wall_s": 40.0}}
    (tmp_path / "walls.json").unlink()
    assert main(["--device", "cpu", "--phase", "report", "--work", str(tmp_path)]) == 2
    assert "run --phase harness first" in capsys.readouterr().out


def test_a_phase_without_a_work_directory_is_a_usage_error(capsys):
    import pytest

    from experiments.harness_throughput import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--phase", "sequential"])
    assert exit_info.value.code == 2 and "needs --work" in capsys.readouterr().err
