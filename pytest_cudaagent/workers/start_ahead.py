"""The next candidate's worker started while this one is checked and timed.

An evaluating process that works through a queue of candidates (an xdist worker of `cudaagent
bench` knows its next item) announces the next pair. Once the current candidate has built (or
has ended before its build), the evaluation starts the announced candidate's worker: its
sandbox, its CUDA context and its build, while the current one's correctness trials, timing and
baselines run on the GPU. The next evaluation takes that worker instead of starting one (#15: a
batch's last builds ran on a mostly idle machine, after the first wave's checks and timings).

Nothing is shared between the two candidates: each has its own process, sandbox and build
directory, as two xdist workers' candidates have. What changes is only when a worker starts:
builds still run one at a time per evaluating process (the next starts once the current one's
build has ended), and a candidate's evaluation still waits for its own start and build. A worker
is taken only by the evaluation it was started for: the same problem, candidate sources, device
and settings.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.per_process import PerProcess

if TYPE_CHECKING:  # channel imports torch; the plugin announces and forgets without it
    from ..core.config import EvalConfig
    from ..core.files import Candidate
    from .channel import Worker
    from .sandbox import Sandbox


@dataclass
class StartedWorker:
    """A candidate's worker started before its evaluation, with what that evaluation needs of
    the moment it started: its sandbox and the workspace files' hashes as they were then."""

    key: str
    worker: Worker
    sandbox: Sandbox
    protected_hashes: dict = field(default_factory=dict)
    started_at: float = field(default_factory=time.perf_counter)

    def close(self) -> None:
        self.worker.close()
        self.sandbox.close()


def started_worker_key(problem: Path, candidate: Candidate, device: str, config: EvalConfig) -> str:
    """What must be equal for an evaluation to take a started worker: the problem, the candidate's
    path and sources (as its worker read them), the device and every setting."""
    settings = json.dumps(config.to_dict(), sort_keys=True, default=str)
    identity = json.dumps([str(Path(problem).resolve()), str(candidate.path.resolve()), candidate.source_hash(),
                           device, settings])
    return hashlib.sha256(identity.encode()).hexdigest()


Starter = Callable[[Path, Path, "EvalConfig"], "StartedWorker | None"]


class StartAhead:
    """This process's announced next pair and the worker started for it (at most one of each).
    Used by the thread that evaluates (a Worker is closed by the thread that opened it); another
    thread's calls do nothing."""

    def __init__(self):
        self._owner = threading.get_ident()
        self._announced: tuple[Path, Path, EvalConfig] | None = None
        self._started: StartedWorker | None = None

    def _mine(self) -> bool:
        return threading.get_ident() == self._owner

    def announce(self, problem: Path, candidate: Path, config: EvalConfig) -> None:
        """The pair this process evaluates next, after the one it is at now."""
        if self._mine():
            self._announced = (Path(problem), Path(candidate), config)

    def clear_announced(self) -> None:
        """Nothing comes next (the process's last item, or one that is no pair): an announcement
        left by an evaluation that ended before starting it must not start a worker now."""
        if self._mine():
            self._announced = None

    def start_announced(self, start: Starter) -> StartedWorker | None:
        """Start the announced pair's worker with `start` (the evaluation core's), once; returns
        it (None if nothing was announced or it could not start)."""
        if not self._mine() or self._announced is None:
            return None
        problem, candidate, config = self._announced
        self._announced = None
        self.close()  # one started for a pair that never came
        self._started = start(problem, candidate, config)
        return self._started

    def take(self, key: str) -> StartedWorker | None:
        """The worker started for `key`, ended or not: what it sent before it ended (its sandbox
        report, its build's error) is read by its evaluation as from any worker. One started for
        another pair stays (an evaluation run twice, outside_kill.py, is not the pair announced);
        the next start or the batch's end closes it."""
        if not self._mine() or self._started is None or self._started.key != key:
            return None
        started, self._started = self._started, None
        return started

    def close(self) -> None:
        if self._started is not None:
            started, self._started = self._started, None
            started.close()

    def forget(self) -> None:
        """The end of a batch: no next pair, and no worker waiting for one."""
        self._announced = None
        self.close()


_state = PerProcess(StartAhead, StartAhead.forget)


def state() -> StartAhead:
    """This process's, made on first use (by the thread that evaluates) and emptied at exit."""
    return _state.get()


def forget() -> None:
    _state.empty()
