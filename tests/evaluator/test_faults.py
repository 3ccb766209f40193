"""Kills in the middle of writing state, then a resume: every state file a run leaves is read back
whole or skipped and reported, and no process of the run outlives it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_cudaagent.core.result import Result
from pytest_cudaagent.records.results_file import (
    append_result,
    done_keys,
    pair_key,
    read_results_file,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def _result(problem: str, candidate: str, status: str = "passed") -> Result:
    return Result(problem, candidate, status=status, passed=status == "passed", correct=status == "passed",
                  device="cpu", log="x" * 20000)


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still running (zombies count as gone) after waiting up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_results_line_cut_by_a_kill_is_skipped_reported_and_redone(tmp_path):
    path = tmp_path / "results.jsonl"
    append_result(path, _result("a.py", "a_c.py"))
    whole = _result("b.py", "b_c.py").to_json()
    with open(path, "a") as handle:  # a kill in the middle of the second line's write
        handle.write(whole[: len(whole) // 2])
    done, message = done_keys(path)
    assert done == {pair_key("a.py", "a_c.py")}
    assert "line 2" in message and str(path) in message
    append_result(path, _result("b.py", "b_c.py", status="incorrect"))  # resume redoes b
    results, lines = read_results_file(path)
    assert [(Path(r.problem).name, r.status) for r in results] == [("a.py", "passed"), ("b.py", "incorrect")]
    assert lines.skipped == [2]
    assert path.read_text().count("\n") == 3  # the new line did not join the cut one


def test_results_file_of_garbage_never_crashes_the_reader(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'\x00\xff{"status": \n[1, 2]\n"text"\n{"problem": 3}\n')
    results, lines = read_results_file(path)
    assert results == [] and lines.skipped == [1, 2, 3, 4]


PARENT_THAT_DIES = """
import os, signal, sys
from pytest_cudaagent.workers import zygote
from pytest_cudaagent.workers.channel import Worker
from tests.evaluator.fault_targets import start_sleeper
worker = Worker(start_sleeper, {}, memory_cap_gb=4)
reply = worker.receive(120)
print(worker.process.pid, reply["sleeper"], *zygote.running_pids(), flush=True)
os.kill(os.getpid(), signal.%s)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_killed_parent_leaves_no_worker_nor_its_children(signal_name):
    parent = subprocess.run([sys.executable, "-c", PARENT_THAT_DIES % signal_name], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=180)
    assert parent.returncode == -getattr(signal, signal_name), parent.stderr
    # the worker, the compiler-like child it started, and the zygote it was forked from (if any)
    pids = [int(pid) for pid in parent.stdout.split()]
    assert len(pids) == 3
    assert _gone_within(pids, seconds=5) == []


PARENT_OF_A_CHILD = """
import os, signal, subprocess, sys
from pytest_cudaagent.system.lifetime import PARENT_PID_ENV
child = subprocess.Popen([sys.executable, "-c", "from pytest_cudaagent.system import lifetime; %s; "
                          "print(flush=True); import time; time.sleep(300)"],
                         env=dict(os.environ, **{PARENT_PID_ENV: str(os.getpid())}), stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")
@pytest.mark.parametrize("tie", [
    "lifetime.die_with_parent_from_env()",  # how bench ties its pytest, and pytest its xdist workers
    "lifetime.exit_when_parent_dies(os.getppid(), poll_s=0.1)",  # the trainer's evaluation pool
])
def test_a_child_tied_to_its_parent_dies_with_it(tie):
    parent = subprocess.run([sys.executable, "-c", PARENT_OF_A_CHILD % ("import os; " + tie)], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=180)
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    assert _gone_within([int(parent.stdout)], seconds=5) == []


def test_a_closed_worker_takes_its_children_with_it():
    from pytest_cudaagent.workers.channel import Worker
    from tests.evaluator.fault_targets import start_sleeper

    worker = Worker(start_sleeper, {}, memory_cap_gb=4)
    sleeper = worker.receive(120)["sleeper"]
    assert _gone_within([sleeper], seconds=0) == [sleeper]
    worker.close()
    assert _gone_within([worker.process.pid, sleeper], seconds=5) == []


@pytest.mark.parametrize("broken", ['{"mode": "eager", "timing": {"median_ms": 0.', "{}", '{"timing": {"x": 1}}', ""])
def test_a_broken_baseline_entry_is_measured_again(tmp_path, broken):
    from pytest_cudaagent.core.config import TimingConfig
    from pytest_cudaagent.core.result import TimingStats
    from pytest_cudaagent.timing.baseline_cache import BaselineCache

    problem = tmp_path / "problem.py"
    problem.write_text("# a problem\n")
    cache = BaselineCache(tmp_path / "cache")
    key = cache.key(problem, "cpu", "eager", TimingConfig(), "kernelbench", {})
    cache.root.mkdir(parents=True)
    cache.path(key).write_text(broken)  # a writer killed midway, or a foreign file
    cache.path(key).with_suffix(".tmp").write_text('{"timing": ')  # its temporary file, left behind
    assert cache.get(key) is None
    measured = TimingStats.from_samples([1.0, 2.0, 3.0])
    cache.put(key, measured, problem, "cpu", "eager")
    assert cache.get(key) == measured
