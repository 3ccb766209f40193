"""The cores this process may run on: its CPU affinity, not the machine's count. A Slurm job, a
container with a cpuset or a `taskset` wrapper sees a share of the machine; sizing workers by
`os.cpu_count()` there starts one per core of the whole machine onto the few it was given."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


def usable_cores() -> int:
    """How many cores this process may use (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def evaluating_processes() -> int:
    """How many processes of this run evaluate at once: pytest-xdist's worker count where this
    process is one of its workers (`cudaagent bench`), else 1."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def cap_torch_threads(count: int) -> int | None:
    """At most `count` intra-op threads for torch in this process, if it has loaded torch (more
    would take turns on the cores they are meant for); returns the count before, or None
    without torch. The caller sets the count back where it should be."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):
        return None
    before = torch.get_num_threads()
    if before > count:
        torch.set_num_threads(count)
    return before


@contextlib.contextmanager
def evaluating_threads() -> Iterator[int]:
    """torch's intra-op threads in the evaluating process held to its share of the cores for the
    block (yields the count), then set back. Its torch work is copies and equality checks of
    outputs between waits, and each parallel region wakes a thread per core that spins on after
    it: on the H100 machine (16 cores) the pool's 15 threads spent 0.6 CPU s each over eight
    pure-PyTorch evaluations, twice the main thread's own work (#41, 2026-11-27), and in a batch
    every evaluating process has such a pool."""
    import torch

    share = max(1, usable_cores() // evaluating_processes())
    before = cap_torch_threads(share)
    try:
        yield min(share, before)
    finally:
        if share < before:
            torch.set_num_threads(before)


def cut(length: int, parts: int, unit: int) -> list[int]:
    """parts + 1 bounds cutting `length` elements into `parts` contiguous runs of nearly equal
    counts of whole `unit`s (the last run ends at `length`)."""
    units = -(-length // unit)
    return [unit * (units * part // parts) for part in range(parts)] + [length]


def in_threads(work, parts: int, name: str) -> list:
    """[work(0), ..., work(parts - 1)], each in a thread of its own, all at once (a pool may run
    two parts one after the other on one thread: each part here is meant to take a core). One
    part runs in the calling thread: no thread is started (the candidate's worker must start
    none after its code has loaded, outside_view.py)."""
    import threading

    if parts == 1:
        return [work(0)]

    answers: list = [None] * parts
    errors: list[BaseException] = []

    def run(part: int) -> None:
        try:
            answers[part] = work(part)
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(part,), name=f"{name}_{part}", daemon=True) for part in range(parts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return answers
