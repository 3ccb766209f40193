"""Output that is not on a terminal (a log, a pipe, CI) is never wrapped nor cut (#45)."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmark.commands import TERMINAL_COLUMNS
from pytest_cudaagent.terminal import LOG_WIDTH, console

from .bench_helpers import fake_result, write_results


def test_bench_leaderboard_in_a_log_keeps_every_header_and_path_whole(tmp_path):
    # The table `cudaagent bench` prints at its end, printed as bench does, to a pipe.
    deep = tmp_path / ("a_folder_name_long_enough_to_be_wrapped_at_eighty_columns_" * 2)
    results = write_results(deep / "results.jsonl", [
        fake_result(str(deep / f"level1/{index}_Some_problem_with_a_long_name.py"), str(deep / f"c{index}.py"))
        for index in range(3)])
    probe = ("import sys\nfrom pathlib import Path\nfrom benchmark.commands import _write_leaderboard\n"
             "from pytest_cudaagent.terminal import console\n"
             f"_write_leaderboard([Path({str(results)!r})], Path({str(deep)!r}), console(), str)\n")
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "…" not in run.stdout, run.stdout
    header = next(line for line in run.stdout.splitlines() if "level" in line and "problems" in line)
    for column in TERMINAL_COLUMNS:
        assert column in header, run.stdout
    assert any(str(deep / "leaderboard.md") in line for line in run.stdout.splitlines()), run.stdout


def test_console_is_wide_off_a_terminal_and_respects_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert console().width == LOG_WIDTH  # pytest captures stdout: not a terminal
    monkeypatch.setenv("COLUMNS", "120")
    assert console().width == 120
