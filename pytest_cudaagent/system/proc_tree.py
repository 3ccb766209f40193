"""A process and its descendants, read from each task's `/proc/<pid>/task/<tid>/children`.

The parent checks a worker's host memory every 50 ms while it waits (channel.py). psutil's
`children(recursive=True)` reads the parent pid of every process on the machine for each walk:
5.5 ms with 466 processes on the dev box, so on the H100 machine, fourteen builds at once, the
evaluating process spent 10-15% of a core per evaluation on the walk (`cpu.parent`, 8-18 CPU s of
a 60-80 s evaluation). The children files name only the tree's own processes (0.08 ms for the
same walk). A process forked by a thread is listed under that thread's task, so every task is
read. Kernels built without CONFIG_PROC_CHILDREN have no such files: psutil's walk is used there.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import psutil

PROC = "/proc"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def children_files_exist(pid: int) -> bool:
    return os.path.exists(f"{PROC}/{pid}/task/{pid}/children")


def tree_pids(root: int) -> list[int]:
    """`root` and every process below it, root first; processes that end during the walk are
    left out. Raises psutil.NoSuchProcess when `root` has ended."""
    if not os.path.isdir(f"{PROC}/{root}"):
        raise psutil.NoSuchProcess(root)
    if not children_files_exist(root):
        process = psutil.Process(root)
        return [root, *(child.pid for child in process.children(recursive=True))]
    found, waiting, seen = [], [root], {root}
    while waiting:
        pid = waiting.pop()
        found.append(pid)
        try:
            tasks = os.listdir(f"{PROC}/{pid}/task")
        except OSError:  # ended meanwhile
            continue
        for task in tasks:
            try:
                with open(f"{PROC}/{pid}/task/{task}/children") as listing:
                    children = [int(child) for child in listing.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in seen:
                    seen.add(child)
                    waiting.append(child)
    return found


def rss_bytes(pids: list[int]) -> int:
    """Summed resident memory of the processes (`statm`'s second field); ended ones count 0."""
    total = 0
    for pid in pids:
        try:
            with open(f"{PROC}/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * _PAGE_BYTES
        except (OSError, ValueError, IndexError):
            continue
    return total


@contextmanager
def stopped(root: int):
    """`root` and every process below it stopped (SIGSTOP) for the block, then continued
    (SIGCONT); yields the pids stopped. `root` first, so it starts no child meanwhile, then what
    is below it, walked twice (a child not yet stopped may have started one). A process that
    ended meanwhile, or that this one may not signal, is passed over: a pause is a courtesy to a
    timed call, never an error."""
    held: list[int] = []

    def stop(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:  # ended, or not ours to signal
            return
        held.append(pid)

    try:
        stop(root)
        if held:
            for _ in range(2):
                try:
                    below = tree_pids(root)[1:]
                except psutil.NoSuchProcess:
                    break
                for pid in below:
                    if pid not in held:
                        stop(pid)
            _wait_until_stopped(held)
        yield held
    finally:
        for pid in held:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass


def _state(pid: int) -> str | None:
    """The process's state letter (/proc/<pid>/stat), None once it has ended."""
    try:
        with open(f"{PROC}/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _wait_until_stopped(pids: list[int], timeout_s: float = 0.2) -> None:
    """A SIGSTOP is delivered when the process next enters the kernel: a process running on
    another core goes on for a moment after os.kill returns. Waits (briefly) until each is
    stopped or has ended, so what follows runs without them."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pids)
    while waiting and time.monotonic() < deadline:
        waiting = [pid for pid in waiting if _state(pid) not in (None, "T", "t", "Z", "X")]
        if waiting:
            time.sleep(0.0005)
