"""The sandbox's outer process exits as the candidate's process did, signals included (#38).

The kernel's OOM killer ended a sandboxed candidate with SIGKILL on the H200 under load; the
outer process, re-raising the signal, set SIG_DFL for SIGKILL, which raises EINVAL, and exited
with code 1: the evaluator read "worker exited with code 1 before giving a verdict" (`crashed`, the
candidate's) instead of "killed by SIGKILL" (killed from outside: evaluated again)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# Run in a process of its own: forking the test process itself (an xdist worker with threads,
# perhaps a zygote of its own) could leave a child stuck on a lock held at the fork.
SCENARIO = r"""
import os, sys, time
from pytest_cudaagent.workers.sandbox import _exit_as

kill_with = int(sys.argv[1])
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
os.kill(candidate, kill_with)
_, status = os.waitpid(outer, 0)
print("signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, "code", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("kill_with", [signal.SIGKILL, signal.SIGTERM])
def test_the_outer_process_ends_by_the_signal_that_ended_the_candidate(kill_with):
    done = subprocess.run([sys.executable, "-c", SCENARIO, str(int(kill_with))], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["signal", str(int(kill_with)), "code", str(-int(kill_with))], done.stdout
