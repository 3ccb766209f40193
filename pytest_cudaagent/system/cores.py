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
