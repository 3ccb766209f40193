"""Python's cyclic garbage collector kept out of timed work, and watched where it runs.

A full collection walks every object the process holds; in a worker that has imported torch (and
torch._dynamo, as the candidate's worker does before its code loads) that is hundreds of
thousands. One that starts inside a timed request is time outside the calls' samples, charged to
the candidate (outside_view.py's timing_unaccounted) or, inside a call, to its sample. As
`timeit` does, the collector is run once before timed work (untimed) and paused until the
work's reply has gone; reference counting still frees everything that is not a cycle.

`GcWatch` times every collection (gc.callbacks), for Result.env["timed_loop"]: where time went,
never a verdict (a candidate can reach it).
"""

from __future__ import annotations

import contextlib
import gc
import time

_perf_counter_ns = time.perf_counter_ns


class GcWatch:
    """The collections run since it was installed: how many and how long, all generations."""

    def __init__(self) -> None:
        self.count = 0
        self.total_ns = 0
        self._started_ns: int | None = None

    def install(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_ns = _perf_counter_ns()
        elif self._started_ns is not None:
            self.count += 1
            self.total_ns += _perf_counter_ns() - self._started_ns
            self._started_ns = None

    def mark(self) -> tuple[int, int]:
        return self.count, self.total_ns

    def since(self, mark: tuple[int, int]) -> dict[str, float]:
        """{"collections": n, "ms": their time} since `mark`."""
        return {"collections": self.count - mark[0], "ms": round((self.total_ns - mark[1]) / 1e6, 4)}


def pause() -> None:
    """A collection now (untimed), then none until `resume`."""
    gc.collect()
    gc.disable()


def resume() -> None:
    gc.enable()


@contextlib.contextmanager
def paused(enabled: bool = True):
    """`pause` ... `resume` around a block (nothing when not `enabled`)."""
    if not enabled:
        yield
        return
    was_enabled = gc.isenabled()
    pause()
    try:
        yield
    finally:
        if was_enabled:
            resume()
