"""The reward on every node: `accelerate launch --num_machines 2` run as two machines on this one
(two launchers, machine ranks 0 and 1, rendezvous at 127.0.0.1), the CPU backend, an RFT stage
scored by the xdist scorer. Each process must score its own episodes, in a folder of its own
under the scoring dir of its machine, with its own pytest run; and each round's rewards must be
those a one-process run gets for the same tasks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from experiments.reward_latency import QUICK_CANDIDATE
from policy.trainer.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "trainer" / "multi_node_worker.py"
ROUNDS, TASKS = 2, 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(path: Path, output_dir: Path) -> Path:
    config = {"output_dir": str(output_dir), "tensorboard": False, "progress": False, "save_every": 100,
              "stages": [{"name": "rft", "environment": {"kind": "cuda-single-turn", "scorer": "xdist",
                                                         "scoring_devices": ["cpu"]},
                          "rollout": {"max_new_tokens": 4, "max_total_tokens": 128},
                          "rft": {"rounds": ROUNDS, "tasks_per_round": TASKS, "minibatch_size": 1,
                                  "micro_batch_size": 1}}]}
    path.write_text(yaml.safe_dump(config))
    return path


def episodes(scoring: Path) -> list[dict]:
    return [json.loads(line) for line in (scoring / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_machines_each_score_their_own_rollouts_with_the_one_process_rewards(tmp_path):
    env = os.environ | {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("CUDAAGENT_SCORING_DIR", None)
    (tmp_path / "candidates").mkdir()
    (tmp_path / "candidates" / "correct.py").write_text(QUICK_CANDIDATE)
    # One process, plain python: the reference.
    single = tmp_path / "single"
    completed = subprocess.run([sys.executable, str(WORKER), str(write_config(tmp_path / "single.yaml", single)),
                                str(tmp_path / "candidates")], cwd=tmp_path, env=env, capture_output=True,
                               text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-5000:]

    # Two machines: the same shared output_dir (as a cluster's shared file system), each
    # machine's scoring under a folder of its own (its local disk in a real cluster).
    config = write_config(tmp_path / "two.yaml", tmp_path / "two")
    port = str(free_port())
    launchers = []
    for machine in (0, 1):
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2",
                   "--num_processes", "2", "--machine_rank", str(machine), "--main_process_ip", "127.0.0.1",
                   "--main_process_port", port, "--mixed_precision", "no", "--dynamo_backend", "no",
                   str(WORKER), str(config), str(tmp_path / "candidates")]
        machine_env = env | {"CUDAAGENT_SCORING_DIR": str(tmp_path / f"node-{machine}-local")}
        launchers.append(subprocess.Popen(command, cwd=tmp_path, env=machine_env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    outputs = []
    for launcher in launchers:
        try:
            outputs.append(launcher.communicate(timeout=600)[0])
        finally:
            if launcher.poll() is None:
                launcher.kill()
    for launcher, output in zip(launchers, outputs, strict=True):
        assert launcher.returncode == 0, output[-6000:]

    reference = episodes(single / "00-rft" / "scoring" / "process-0")
    assert [e["status"] for e in reference] == ["passed", "incorrect", None] * ROUNDS
    for machine in (0, 1):
        local = tmp_path / f"node-{machine}-local" / "00-rft"
        # Process N ran on machine N (one process per machine): its scoring is only under that machine's dir.
        assert [path.name for path in local.iterdir()] == [f"process-{machine}"]
        scoring = local / f"process-{machine}"
        scorer = json.loads((scoring / "scorer.json").read_text())
        assert scorer["process"] == machine and scorer["devices"] == ["cpu"]
        mine = episodes(scoring)
        assert {e["process"] for e in mine} == {machine}
        # Its own candidates, written and evaluated in its own folder, by its own pytest runs.
        written = [Path(e["candidate"]) for e in mine if e["candidate"]]
        assert written and all(scoring in path.parents for path in written)
        for batch in sorted(scoring.glob("batch-*")):
            rows = [json.loads(line) for line in (batch / "results.jsonl").read_text().splitlines()]
            assert rows and all(Path(row["candidate"]).parent == batch / "candidates" for row in rows)
        # The one-process run's rewards, round by round.
        assert [(e["batch"], e["reward"], e["status"]) for e in mine] == \
            [(e["batch"], e["reward"], e["status"]) for e in reference]
    # Nothing was scored in the shared output dir.
    assert not (tmp_path / "two" / "00-rft" / "scoring").exists()
    # The metrics count both machines' episodes: twice the one process's, reward for reward.
    one, two = (read_metrics(run / "00-rft" / "metrics.jsonl") for run in (single, tmp_path / "two"))
    assert len(one) == len(two) == ROUNDS
    for before, after in zip(one, two, strict=True):
        assert Counter({k: 2 * v for k, v in before["reward_counts"].items()}) == Counter(after["reward_counts"])
        assert after["kept"] == 2 * before["kept"] and after["reward_mean"] == pytest.approx(before["reward_mean"])
