"""The cores this process may run on: its CPU affinity, not the machine's count. A Slurm job, a
container with a cpuset or a `taskset` wrapper sees a share of the machine; sizing workers by
`os.cpu_count()` there starts one per core of the whole machine onto the few it was given."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """How many cores this process may use (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


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
