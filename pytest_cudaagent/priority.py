"""The timed process's CPU priority, raised for as long as it times (TimingConfig.timing_nice).

A timing holds the GPU alone (locks.py), but not the CPU: in a bench run the other workers
build, import and check outputs at the same time. Where the host's launch is part of the time
(several launches per call, torch.compile's Python wrapper, a Triton launcher), a timed thread
that waits for a core shows up in the samples: on the H100 the compatibility suite's compile
baselines came out with IQRs of 20-130% of their medians under a four-worker bench. While a
worker times, the evaluator raises every thread of its process tree to `nice` (the sandboxed
candidate cannot do it itself: its capabilities are dropped) and puts them back afterwards.
Lowering a nice value needs root or CAP_SYS_NICE; without either nothing changes, and
`Result.env["timing_nice"]` says so.
"""

from __future__ import annotations

import contextlib
import os
import sys

import psutil

NOT_PERMITTED = "not permitted"


def _threads(pid: int) -> list[int]:
    """Every thread id of the process and its descendants."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    found = []
    for process in processes:
        try:
            found += [thread.id for thread in process.threads()]
        except psutil.Error:
            continue
    return found


def _set(tid: int, nice: int) -> None:
    # PRIO_PROCESS with a thread id: Linux's nice values are per thread.
    os.setpriority(os.PRIO_PROCESS, tid, nice)


@contextlib.contextmanager
def raised(pid: int | None, nice: int | None, report: dict):
    """Every thread of `pid`'s tree at `nice` inside the block, at its old value after (threads
    made inside it go back to the process's old value). `report["timing_nice"]`: the value
    used, or NOT_PERMITTED."""
    if nice is None or pid is None or not sys.platform.startswith("linux"):
        yield
        return
    old: dict[int, int] = {}
    try:
        for tid in _threads(pid):
            with contextlib.suppress(ProcessLookupError):
                old[tid] = os.getpriority(os.PRIO_PROCESS, tid)
                _set(tid, nice)
        report["timing_nice"] = nice
    except PermissionError:
        report["timing_nice"] = NOT_PERMITTED
    try:
        yield
    finally:
        usual = old.get(pid, 0)
        for tid in _threads(pid) if old else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                _set(tid, old.get(tid, usual))
