"""Ctrl-C during `cudaagent bench`: one line (done, left, where the results are, the --resume
command), no traceback, every process of the run gone; --resume then finishes the rest (#45)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmark.batch import BatchInterrupted
from benchmark.commands import interrupted_summary

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * {factor}


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    return []
"""

# Slow while the marker file exists: the run is interrupted while this one is evaluated.
CANDIDATE = """import os
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while os.path.exists({marker!r}):
            time.sleep(0.2)
        return x * {factor}
"""


def _session_processes(session_id: int) -> list[int]:
    """Pids whose session is `session_id` (field 6 of /proc/<pid>/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[3]) == session_id:
            found.append(int(entry.name))
    return found


def _sigint_by_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_ctrl_c_prints_one_line_and_resume_finishes(tmp_path):
    problems, candidates, out = tmp_path / "problems", tmp_path / "candidates", tmp_path / "out"
    problems.mkdir()
    candidates.mkdir()
    marker = tmp_path / "hold"
    marker.write_text("")
    for index, factor in enumerate((1.0, 2.0, 3.0)):
        (problems / f"p{index}.py").write_text(PROBLEM.format(factor=factor))
        source = CANDIDATE.format(marker=str(marker), factor=factor) if index == 1 else \
            CANDIDATE.format(marker="/nonexistent", factor=factor)
        (candidates / f"p{index}.py").write_text(source)
    command = [sys.executable, "-m", "pytest_cudaagent.cli", "bench", "--problems", "problems",
               "--candidates", "candidates", "--device", "cpu", "--no-timing", "--policy", "permissive",
               "--workers", "1", "--out", "out"]
    # Its own session, as a terminal's foreground job: Ctrl-C is SIGINT to the whole group. With
    # SIGINT's default action, as a terminal gives it: a suite run in the background of a
    # non-interactive shell (`nohup ... &`) hands its children SIGINT ignored, and Python then
    # never raises KeyboardInterrupt.
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=_sigint_by_default)
    deadline = time.monotonic() + 600
    while len(_rows(out / "results.jsonl")) < 1 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
    assert len(_rows(out / "results.jsonl")) == 1, process.communicate()
    time.sleep(3)  # the slow pair under way
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stdout + stderr, stderr
    summary = [line for line in stderr.splitlines() if line.startswith("interrupted:")]
    assert len(summary) == 1, stderr
    assert "1 of 3 pair(s) done, 2 left" in summary[0] and "out/results.jsonl" in summary[0]
    assert summary[0].rstrip().endswith("--workers 1 --out out --resume")
    assert _session_processes(process.pid) == []  # pytest, its workers and the evaluations are gone

    marker.unlink()
    finished = subprocess.run(command + ["--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    rows = _rows(out / "results.jsonl")
    assert sorted(Path(row["problem"]).name for row in rows) == ["p0.py", "p1.py", "p2.py"]  # each once
    assert all(row["status"] == "passed" for row in rows)


# A pytest that does not end on SIGTERM (stuck in its own shutdown), with a child that ignores it too.
STUCK = """import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('ready', flush=True); time.sleep(600)"], stdout=sys.stdout)
time.sleep(600)
"""


def test_ending_the_run_kills_a_pytest_that_ignores_sigterm_and_what_is_below_it():
    import psutil

    from benchmark.batch import _end

    process = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    below = psutil.Process(process.pid).children(recursive=True)
    assert len(below) == 1
    ending = threading.Thread(target=_end, args=(process,), kwargs={"grace_s": 1.0}, daemon=True)
    ending.start()
    ending.join(timeout=15)
    if ending.is_alive():  # the old wait for ever: clean up, then fail
        for stuck in below + [psutil.Process(process.pid)]:
            stuck.kill()
    assert not ending.is_alive(), "the run kept waiting for a pytest that ignores SIGTERM"
    assert process.returncode == -signal.SIGKILL
    assert not below[0].is_running() or below[0].status() == psutil.STATUS_ZOMBIE


def test_interrupted_summary_names_the_resume_command_without_overwrite():
    stop = BatchInterrupted(Path("/x/out/results.jsonl"), done=4, todo=10, signal_exit=130)
    line = interrupted_summary(stop, str, ["bench", "--overwrite", "--out", "out dir"])
    assert line == ("interrupted: 4 of 10 pair(s) done, 6 left; results in /x/out/results.jsonl; "
                    "go on with: cudaagent bench --out 'out dir' --resume")
    assert interrupted_summary(stop, str, ["bench", "--resume"]).endswith("cudaagent bench --resume")


LOOPS_FOREVER = """import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
"""


@pytest.mark.slow
def test_bench_timeout_flag_ends_a_looping_candidate_after_the_given_seconds(tmp_path):
    (tmp_path / "problems").mkdir()
    (tmp_path / "candidates").mkdir()
    (tmp_path / "problems" / "p0.py").write_text(PROBLEM.format(factor=1.0))
    (tmp_path / "candidates" / "p0.py").write_text(LOOPS_FOREVER)
    run = subprocess.run([sys.executable, "-m", "pytest_cudaagent.cli", "bench", "--problems", "problems",
                          "--candidates", "candidates", "--device", "cpu", "--no-timing", "--policy", "permissive",
                          "--workers", "1", "--out", "out", "--timeout", "15"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    rows = _rows(tmp_path / "out" / "results.jsonl")
    assert [row["status"] for row in rows] == ["timeout"], run.stdout + run.stderr
    assert "15 s" in rows[0]["error"]


def test_bench_rejects_a_timeout_that_is_not_positive(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pytest_cudaagent.cli", "bench", "--device", "cpu", "--out", "out",
                          "--build-timeout", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 2 and "--build-timeout must be a positive number of seconds" in run.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()
