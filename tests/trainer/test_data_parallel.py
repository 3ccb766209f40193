"""Two data-parallel processes on the CPU (gloo), launched the way users launch several GPUs:
`accelerate launch --multi_gpu --num_processes 2` (ACCELERATE_USE_CPU=1 makes them CPU
processes). The collective helpers must reproduce one process holding the whole batch, and every
stage must run to the end with metrics over both processes' episodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from policy.trainer.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]


def launch_two_processes(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", "0", *args]
    completed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]
    return completed


def test_collective_helpers_match_one_process_holding_the_whole_batch(tmp_path):
    launch_two_processes([str(REPO / "tests/trainer/data_parallel_worker.py"), str(tmp_path)], tmp_path)
    ranks = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    for findings in ranks:
        assert findings["processes"] == 2
        assert findings["whiten_matches_whole_batch"] and findings["whiten_differs_from_local_only"]
        assert findings["explained_variance"] == pytest.approx(findings["explained_variance_whole"], abs=1e-5)
        assert findings["mean_loss"] == pytest.approx(1.5)
        assert findings["share_total"] == 7
    # The processes sample differently; process 0 as a one-process run seeded alike would.
    assert ranks[0]["sampling_draw"] != ranks[1]["sampling_draw"]
    torch.manual_seed(7)
    assert ranks[0]["sampling_draw"] == pytest.approx(torch.rand(4).tolist())
    # 7 items over 2 processes: 3 each (one left out), dealt from both processes' lists.
    shares = [findings["share"] for findings in ranks]
    assert [len(share) for share in shares] == [3, 3]
    assert not set(shares[0]) & set(shares[1])
    assert any(item.startswith("rank1") for item in shares[0] + shares[1])


def test_every_stage_runs_on_two_processes_with_metrics_over_both(tmp_path):
    config = yaml.safe_load((REPO / "policy/trainer/configs/tiny-pipeline.yaml").read_text())
    # Short stages: this checks that the distributed path runs and counts both processes, not learning.
    config["stages"][0]["ppo"]["steps"] = 3
    config["stages"][1]["rft"]["rounds"] = 2
    config["stages"][2]["value"]["rounds"] = 2
    config["stages"][3]["ppo"]["steps"] = 2
    config.update(output_dir=str(tmp_path / "run"), save_every=2, tensorboard=False)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    completed = launch_two_processes(["-m", "policy.trainer.cli", "--config", str(tmp_path / "config.yaml"),
                                      "--no-progress"], tmp_path)
    assert completed.stdout.count("models and metrics under") == 2  # both processes finished
    run = tmp_path / "run"
    single, rft, value, multi = (read_metrics(run / name / "metrics.jsonl") for name in
                                 ("00-ppo-single-turn", "01-rft", "02-value-pretrain", "03-ppo-multi-turn"))
    # One line per step (the main process logs), each counting both processes' episodes.
    assert [r["step"] for r in single] == [0, 1, 2] and [r["step"] for r in multi] == [0, 1]
    for records, per_process in ((single, 32), (multi, 16), (rft, 32), (value, 32)):
        assert all(sum(r["reward_counts"].values()) == 2 * per_process for r in records)
    # Generated tokens are summed over both processes: more than one process's 32 answers of at
    # most 6 tokens could hold.
    assert max(r["generated_tokens"] for r in single) > 32 * 6
    # RFT trains on an even share of every process's kept episodes (at most one left out).
    assert all(r["kept"] - 1 <= r["trained_on"] <= r["kept"] and r["trained_on"] % 2 == 0 for r in rft)
    for stage in ("00-ppo-single-turn", "01-rft", "02-value-pretrain", "03-ppo-multi-turn"):
        assert (run / stage / "final" / "stage_done.json").exists()


def test_scaling_benchmark_compares_one_and_two_processes(tmp_path):
    """experiments/ppo_scaling.py on CPU processes: both curve runs train on the same global batch,
    and the table, curves and plot are written (its timings mean nothing on the CPU)."""
    completed = subprocess.run([sys.executable, "-m", "experiments.ppo_scaling", "--out", str(tmp_path), "--cpu",
                                "--quick", "--only", "curve"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:] + (tmp_path / "launch.log").read_text()[-3000:]
    summary = {row["run"]: row for row in json.loads((tmp_path / "scaling.json").read_text())["summary"]}
    assert set(summary) == {"curve-1", "curve-2"}
    assert summary["curve-1"]["processes"] == 1 and summary["curve-2"]["processes"] == 2
    assert summary["curve-1"]["episodes_per_step"] == summary["curve-2"]["episodes_per_step"] == 64
    assert summary["curve-1"]["throughput_x"] == 1.0 and summary["curve-2"]["tokens_per_s"] > 0
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "curve-2 reward curve:" in completed.stdout
