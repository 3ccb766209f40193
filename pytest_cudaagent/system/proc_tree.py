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
