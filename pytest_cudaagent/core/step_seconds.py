"""Seconds summed per named step: a worker's own steps inside a request (sent in its reply as
"steps"), the evaluating process's own work and its waits on each worker request, all kept in
Result.profile."""

from __future__ import annotations

import contextlib
import time


class StepSeconds:
    """Seconds of a worker's named steps inside its requests, summed; sent in a reply as "steps"
    ({step: seconds}) and kept in Result.profile as "<side>.<request>.<step>": where a request's
    time went inside the worker, which the parent's clock of the request cannot say (#41: in a
    batch of eight, the reference's prepare took 3.1 s against 1.0 s alone). Given `into`, it adds
    to that dict instead (the evaluating process's own seconds in Result.profile, a Worker's waits)."""

    def __init__(self, into: dict[str, float] | None = None) -> None:
        self.seconds: dict[str, float] = {} if into is None else into

    @contextlib.contextmanager
    def __call__(self, step: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(step, time.perf_counter() - started)

    def add(self, step: str, seconds: float) -> None:
        self.seconds[step] = self.seconds.get(step, 0.0) + seconds

    def taken(self) -> dict[str, float]:
        """The seconds so far, and a fresh count for the next request."""
        seconds, self.seconds = self.seconds, {}
        return seconds
