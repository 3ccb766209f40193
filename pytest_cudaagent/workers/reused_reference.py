"""A reference worker's process kept for the next problem this process evaluates (#41).

Each evaluation has a reference worker: a process forked from the zygote that opens its own CUDA
context, imports the problem and prepares its sets. On the H100 machine a context took 0.18 s to
open alone and 1.5 s in a batch of eight evaluations (the driver opens them one at a time; two per
evaluation, the reference's and the candidate's): the reference's preparation went from 1.0 s
alone to 2.6 s there, of it 1.3 s more in opening its context
(`docs/results/h100-2026-11-28-session17/steps/`). So once an evaluation has its verdict, its
reference worker, rather than exit, lets its problem go (`release`: the model, the sets, the
problem's module) and waits, context open, for the next evaluation of this process, which sends
it its own problem (`load`) and uses it as a fresh one.

The reference runs no candidate code, so nothing in it is a candidate's. What one problem could
leave for the next is checked before the process is kept (`left_behind`): torch's process-wide
defaults (dtype, device, grad mode, deterministic algorithms, threads), `sys.path`, modules
imported from outside the installed packages and the standard library (a helper beside a
problem), and an error the device has kept (a failed kernel ends every later use of its
context). The backend knobs are set again by each problem's server (backend_settings.apply).

Only evaluations that do not time keep it: timed ones start a fresh reference, as every speed
figure of #40 was measured with (its eager and compile baselines run in the reference's process).
And only in a process that evaluates one pair after another and says so (`allow`: the pytest
plugin, for its session, which ends the waiting worker when it finishes): a lone `evaluate()`
leaves no process behind it. `CUDAAGENT_REUSE_REFERENCE=0` turns the reuse off.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.per_process import PerProcess

if TYPE_CHECKING:  # channel imports torch
    from .channel import Worker

ENABLE_ENV = "CUDAAGENT_REUSE_REFERENCE"
# Problems one process serves at most (its first included) before it exits: what a problem's
# Python objects leave in the heap, and the allocator's fragments, do not pile up without end.
PROBLEMS_AT_MOST = 32
# The reply to `release` (the problem let go, the device synchronized) within this; else the
# worker is closed and the next evaluation starts a fresh one.
RELEASE_TIMEOUT_S = 60.0


_allowed = False  # set by allow()


def allow(allowed: bool = True) -> None:
    """This process evaluates pairs one after another (a pytest session of the plugin): a
    reference worker may wait between them. Off again (`allow(False)`) ends the waiting one."""
    global _allowed
    _allowed = allowed
    if not allowed:
        close_spare()


def enabled() -> bool:
    return _allowed and os.environ.get(ENABLE_ENV, "1") != "0"


# -- in the reference's worker ------------------------------------------------------------------


def process_state() -> dict:
    """What a problem could change for every later one in the process, read now."""
    import torch

    return {
        "default_dtype": str(torch.get_default_dtype()),
        "default_device": str(torch.get_default_device()),
        "grad_enabled": torch.is_grad_enabled(),
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "threads": torch.get_num_threads(),
        "sys_path": list(sys.path),
    }


def _installed_roots() -> tuple[str, ...]:
    """Where modules that are no problem's own come from: the standard library, the installed
    packages (torch, numpy, ...), and this package."""
    paths = sysconfig.get_paths()
    roots = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths}
    roots.add(str(Path(__file__).resolve().parents[1]))
    return tuple(str(Path(root).resolve()) + os.sep for root in roots)


def left_behind(before: dict, modules_before: set[str], problem_module: str) -> str:
    """Why this process should not serve another problem ("" if it may): what differs from
    `before` (process_state, read before the first problem was imported), or a module imported
    since `modules_before` from outside the installed roots (other than the problem's own,
    `problem_module`, which the next load replaces)."""
    now = process_state()
    changed = [name for name in before if now[name] != before[name]]
    if changed:
        return f"the problem changed torch's or Python's process-wide state ({', '.join(changed)})"
    roots = _installed_roots()
    for name in set(sys.modules) - modules_before - {problem_module}:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and not str(Path(file).resolve()).startswith(roots):
            return f"the problem imported {name} from {file}"
    return ""


# -- in the evaluating process ------------------------------------------------------------------


class SpareReference:
    """This process's reference worker waiting for its next problem: at most one (each
    evaluating process evaluates one pair at a time). Used by the thread that made it (a Worker
    is closed by the thread that opened it)."""

    def __init__(self) -> None:
        self._worker: Worker | None = None
        self.problems_served = 0  # by the waiting worker, so far
        self._owner = threading.get_ident()

    def put(self, worker: Worker, problems_served: int) -> None:
        """Keep `worker`, asked to `release` its problem (its reply is read by `take`); the one
        waiting before, if any, is closed. Past PROBLEMS_AT_MOST, or from another thread, it is
        closed instead."""
        if threading.get_ident() != self._owner or problems_served >= PROBLEMS_AT_MOST:
            worker.close()
            return
        self.close()
        self._worker, self.problems_served = worker, problems_served

    def take(self) -> tuple[Worker, int] | None:
        """The waiting worker, with how many problems it has served, once it has let its last
        one go; None if there is none, or it could not (it is closed)."""
        worker, self._worker = self._worker, None
        if worker is None or threading.get_ident() != self._owner:
            return None
        try:
            reply = worker.receive(RELEASE_TIMEOUT_S)
        except BaseException as error:  # died, timed out, answered an error: a fresh one instead
            worker.close()  # out of the slot: no one else would (an interrupt here included)
            if isinstance(error, Exception):
                return None
            raise
        if not reply.get("reusable"):
            worker.close()
            return None
        return worker, self.problems_served

    def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()


_spare = PerProcess(SpareReference, SpareReference.close)


def spare() -> SpareReference:
    """This process's slot, made on first use (by the thread that evaluates) and emptied at exit."""
    return _spare.get()


def close_spare() -> None:
    """Ends the waiting reference worker, if any (the end of a batch, the process's exit)."""
    _spare.empty()
