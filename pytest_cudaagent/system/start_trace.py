"""Timestamps of a run's processes, for finding where a batch's first seconds go (#41: on the
H100 machine a batch's first evaluation began 12-16 s into a 34-39 s run, and its results said
only when each evaluation began, not what the seconds before were spent on).

With CUDAAGENT_TRACE naming a file, each process of the run (the bench, pytest's controller and
workers, their zygotes, the evaluations) appends one JSON line per mark: the wall-clock time (one
clock for every process), its pid, the xdist worker it belongs to and the event. Unset, a mark
costs one dictionary lookup. `python -m experiments.start_trace FILE` turns the file into a table
and a plot. A candidate's worker marks only before its sandbox, which refuses the file; what it
spends after is in Result.profile."""

from __future__ import annotations

import json
import os
import time

TRACE_ENV = "CUDAAGENT_TRACE"


def mark(event: str, **fields) -> None:
    """Appends `event` (with `fields`, plain JSON values) to the trace file, if one is set. One
    write of one line in append mode: lines of several processes do not interleave."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    if not os.path.isabs(path):
        # Named from the user's directory: the processes started from here on (pytest runs in the
        # run's directory, workers in their scratch) must write to the same file.
        path = os.environ[TRACE_ENV] = os.path.abspath(path)
    # The xdist worker a process belongs to (its zygote and workers inherit the variable).
    line = json.dumps({"t": time.time(), "pid": os.getpid(), "xdist": os.environ.get("PYTEST_XDIST_WORKER"),
                       "event": event, **fields}, default=str) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:  # a process that may not write there (a sandbox) leaves no mark
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def created() -> float | None:
    """When this process started (wall clock, to the kernel's tick), where a trace is written: the
    seconds before a process's first mark (its interpreter's start and imports) are part of a
    run's start. Read from /proc/self/stat against the time since boot (psutil's create_time
    counts from the boot's whole second, up to a second off); None where there is no /proc."""
    if not os.environ.get(TRACE_ENV):
        return None
    try:
        with open("/proc/self/stat") as stat:
            # Field 22, counted after the command's closing parenthesis (the command may hold spaces).
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - since_start
