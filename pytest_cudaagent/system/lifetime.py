"""Processes that end with the run that started them, however it ends: each child the evaluator
starts (pytest controller, xdist workers, worker processes) is killed by the kernel when its
parent dies, even by SIGKILL, and a worker process takes everything it started (compilers) with it.
Linux only (prctl); elsewhere these are no-ops and only orderly exits clean up."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

# The pid a child should die with, passed down by whoever starts it (the bench runner for its
# pytest controller; the controller for its xdist workers).
PARENT_PID_ENV = "CUDAAGENT_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0


def die_with_parent(parent_pid: int | None) -> None:
    """SIGKILL this process when `parent_pid` (the thread that started it, in kernel terms) ends.
    A parent that died before the request leaves us already adopted: exit now."""
    if parent_pid is None or not _set_parent_death_signal(signal.SIGKILL):
        return
    if os.getppid() != parent_pid:
        os._exit(1)


def die_with_parent_from_env() -> None:
    """For a process started with PARENT_PID_ENV set: die with that process if it is our parent
    (a process further down, or the same process run in-process, is left alone). Then names this
    process in os.environ, for the processes it starts from here on."""
    named = int(os.environ.get(PARENT_PID_ENV) or 0)
    if named and named != os.getpid():
        if os.getppid() == named:
            die_with_parent(named)
        elif not alive(named):  # it died while we started: we are the orphan it left
            os._exit(1)
    os.environ[PARENT_PID_ENV] = str(os.getpid())


def exit_when_parent_dies(parent_pid: int, poll_s: float = 1.0) -> None:
    """For a pool process made by some thread that may end before it (a process pool started
    from a worker thread), where the kernel's parent-death signal would fire too early: a
    daemon thread watches for adoption and SIGKILLs this process, and so its workers."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="exit-when-parent-dies", daemon=True).start()


def alive(pid: int) -> bool:
    """The process `pid` exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        pass
    return True


def lead_session_and_reap_it(parent_pid: int) -> None:
    """In a freshly spawned worker process: die with the parent, and lead a session of our own
    whose every member (compilers, whatever the worker starts) is SIGKILLed as soon as this
    process ends for any reason. A session, not a process group: ninja puts each compiler in a
    group of its own, but no process leaves a session without setsid. A forked watcher does the
    killing, since a process killed by SIGKILL cleans up nothing itself."""
    die_with_parent(parent_pid)
    if not sys.platform.startswith("linux"):
        return
    os.setsid()
    worker_pid = os.getpid()  # also the session's id
    if os.fork():
        return
    # The watcher: no fd of the worker kept open (the parent reads EOF on the pipe when the
    # worker dies), waits for SIGTERM, sent by the kernel when the worker ends.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 65536)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() == worker_pid:
        signal.sigwait({signal.SIGTERM})
    _kill_session(worker_pid)
    os._exit(0)


def _kill_session(session: int) -> None:
    """SIGKILLs every other process of `session`; a few rounds, for those forked meanwhile."""
    for _ in range(5):
        members = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    if os.getsid(int(entry)) == session:
                        members.append(int(entry))
                except OSError:  # gone, or not ours to ask about
                    continue
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        time.sleep(0.01)


def stop_on_sigterm() -> None:
    """Let SIGTERM (`timeout`, a job scheduler, a killed session) end the process as Ctrl-C
    would: Python unwinds, so `finally` blocks end the workers and nothing half-done is recorded
    (results and manifests are written only once an item is finished); `--resume` goes on."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
