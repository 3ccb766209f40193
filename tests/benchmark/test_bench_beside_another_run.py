"""The main job on a host where another run holds the timing lock (#45): bench says so while it
waits (its evaluations' notes, shown on the progress line) and still reports every pair."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * {factor}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""

CANDIDATE = PROBLEM.replace("class Model(", "class ModelNew(").split("\n\ndef get_inputs")[0] + "\n"

HOLDER = textwrap.dedent("""
    import sys, time
    from pytest_cudaagent.timing.locks import device_lock
    with device_lock("cpu", 0.1):
        print("held", flush=True)
        time.sleep(float(sys.argv[1]))
""")


@pytest.mark.slow
def test_bench_beside_another_runs_timing_says_so_and_reports_every_pair(tmp_path):
    (tmp_path / "problems").mkdir()
    (tmp_path / "candidates").mkdir()
    for index in range(3):
        (tmp_path / "problems" / f"p{index}.py").write_text(PROBLEM.format(factor=index + 1))
        (tmp_path / "candidates" / f"p{index}.py").write_text(CANDIDATE.format(factor=index + 1))
    env = dict(os.environ, CUDAAGENT_LOCK_DIR=str(tmp_path / "locks"))
    other = subprocess.Popen([sys.executable, "-c", HOLDER, "60"], stdout=subprocess.PIPE, text=True,
                             env=dict(env, CUDAAGENT_RUN_ID="other", CUDAAGENT_RUN_COMMAND="cudaagent verify a.py b.py"))
    assert other.stdout.readline().strip() == "held"
    bench = subprocess.Popen([sys.executable, "-m", "pytest_cudaagent.cli", "bench", "--problems", "problems",
                              "--candidates", "candidates", "--device", "cpu", "--policy", "permissive",
                              "--baselines", "eager", "--workers", "1", "--out", "out"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status_dir = tmp_path / "out" / ".bench-run" / "status"
    said = set()
    while bench.poll() is None:
        for path in status_dir.glob("*.json") if status_dir.is_dir() else []:
            try:
                said.add(json.loads(path.read_text())["waiting"])
            except (OSError, ValueError, KeyError):
                continue
        time.sleep(0.2)
    stdout, stderr = bench.communicate()
    other.wait()
    assert bench.returncode == 0, stdout + stderr
    assert any(f"held by pid {other.pid} of another run (cudaagent verify a.py b.py)" in line for line in said), said
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(row["status"] for row in rows) == ["passed"] * 3
    assert not any(warning["rule"] == "timed_beside_other_work" for row in rows for warning in row["warnings"])
