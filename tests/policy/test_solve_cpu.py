"""`cudaagent solve` end to end on the CPU backend: the scripted engine writes a C++ kernel,
compiles it (one real build), verifies, profiles and finishes; the outputs are in the
leaderboard's input layout."""

import argparse
from pathlib import Path

import pytest

from policy.cli import register
from policy.trajectory import read_events, read_training_episode
from pytest_cudaagent import Result

ROOT = Path(__file__).parents[2]
PROBLEM = ROOT / "examples" / "problems" / "leaky_relu.py"


def cli(*argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


@pytest.mark.slow
def test_scripted_agent_solves_an_example_problem_on_cpu(tmp_path):
    out = tmp_path / "run"
    # eager only: the CPU machine would spend minutes building torch.compile's C++ baseline.
    code = cli("solve", str(PROBLEM), "--engine", "scripted", "--model", str(ROOT / "policy" / "scripts" / "cpu"),
               "--out", str(out), "--device", "cpu", "--baselines", "eager")
    assert code == 0
    [line] = (out / "results.jsonl").read_text().splitlines()
    result = Result.from_json(line)
    assert result.status == "passed" and result.reward >= 1, result.summary()
    assert Path(result.candidate) == out / "candidates" / "leaky_relu_sample_0"
    assert (out / "candidates" / "leaky_relu_sample_0" / "kernels" / "leaky_relu.cpp").is_file()

    events = read_events(out / "trajectories" / "leaky_relu_sample_0.jsonl")
    results = {e["name"]: e for e in events if e["event"] == "tool_result"}
    assert results["compile"]["text"].startswith("compile: OK")
    assert results["verify"]["text"].startswith("verify: PASSED (5/5 trials")
    assert results["profile"]["text"].startswith("profile: PASSED") and "eager" in results["profile"]["text"]
    assert results["profile"]["reward"] == result.reward  # nothing changed after profile: its Result is final
    end = events[-1]
    assert (end["event"], end["stop_reason"], end["turns"]) == ("end", "finish", 6)
    assert read_training_episode(out / "trajectories" / "leaky_relu_sample_0.jsonl").reward == result.reward

    from benchmark.leaderboard import results_frame

    frame = results_frame([out / "results.jsonl"])
    assert len(frame) == 1 and bool(frame["passed"].iloc[0])


def test_cli_errors_exit_2_with_a_reason(tmp_path, capsys):
    assert cli("solve", str(tmp_path / "none"), "--engine", "scripted", "--model", "x", "--out", str(tmp_path)) == 2
    assert "no such problem file or directory" in capsys.readouterr().err
    assert cli("solve", str(PROBLEM), "--engine", "openai", "--model", "m", "--out", str(tmp_path)) == 2
    assert "--base-url" in capsys.readouterr().err
    (tmp_path / "used" / "candidates" / "old").mkdir(parents=True)
    assert cli("solve", str(PROBLEM), "--engine", "scripted", "--model", str(ROOT / "policy" / "scripts" / "cpu"),
               "--out", str(tmp_path / "used"), "--device", "cpu") == 2
    assert "fresh --out" in capsys.readouterr().err


def test_problem_directories_list_only_problem_files(tmp_path):
    from policy.solve import find_problems

    (tmp_path / "helpers.py").write_text("X = 1\n")
    (tmp_path / "relu.py").write_text(PROBLEM.read_text())
    assert find_problems(tmp_path) == [tmp_path / "relu.py"]
    assert [p.name for p in find_problems(ROOT / "examples" / "problems")] == sorted(
        p.name for p in (ROOT / "examples" / "problems").glob("*.py"))


def test_evaluation_pool_pins_one_worker_pool_per_gpu_and_fails_unbuildable_workspaces(tmp_path, monkeypatch):
    import os

    from policy.evaluation_pool import EvaluationPool, visible_gpus
    from pytest_cudaagent import EvalConfig

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert visible_gpus() == ["2", "5"]
    with EvaluationPool("cuda") as pool:
        seen = [executor.submit(os.getenv, "CUDA_VISIBLE_DEVICES").result() for executor in pool._executors]
    assert seen == ["2", "5"]
    empty = tmp_path / "ws"
    empty.mkdir()
    with EvaluationPool("cpu") as pool:
        result = pool.evaluate(PROBLEM, empty, EvalConfig(device="cpu"))
    assert (result.status, result.reward) == ("build_error", -1.0) and "model_new.py" in result.error
