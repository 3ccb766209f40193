"""The sandbox's outer process exits as the candidate's process did, signals included (#38).

The kernel's OOM killer ended a sandboxed candidate with SIGKILL on the H200 under load; the
outer process, re-raising the signal, set SIG_DFL for SIGKILL, which raises EINVAL, and exited
with code 1: the evaluator read "worker exited with code 1 before giving a verdict" (`crashed`, the
candidate's) instead of "killed by SIGKILL" (killed from outside: evaluated again)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pytest_cudaagent.workers.sandbox import _exit_as


def _outer_exit_status(kill_with: int) -> int:
    """Forks the outer process, which forks the candidate's and waits for it as the sandbox does;
    the candidate is ended from outside by `kill_with`. The outer process's wait status."""
    read_end, write_end = os.pipe()
    outer = os.fork()
    if outer == 0:  # the sandbox's outer process
        os.close(read_end)
        candidate = os.fork()
        if candidate == 0:
            time.sleep(60)
            os._exit(0)
        os.write(write_end, candidate.to_bytes(4, "little"))
        try:
            _exit_as(candidate, None)
        finally:
            os._exit(99)  # _exit_as must not return
    os.close(write_end)
    candidate = int.from_bytes(os.read(read_end, 4), "little")
    os.close(read_end)
    os.kill(candidate, kill_with)
    _, status = os.waitpid(outer, 0)
    return status


@pytest.mark.parametrize("kill_with", [signal.SIGKILL, signal.SIGTERM])
def test_the_outer_process_ends_by_the_signal_that_ended_the_candidate(kill_with):
    status = _outer_exit_status(kill_with)
    assert os.WIFSIGNALED(status), f"exited with code {os.waitstatus_to_exitcode(status)}"
    assert os.WTERMSIG(status) == kill_with
