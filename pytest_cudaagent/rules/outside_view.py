"""What the evaluating process sees of a candidate's timed calls from outside the worker: its own
clock around the timed request, and `/proc` (each thread's CPU time).

The candidate's code runs in the worker and can reach every object there: its timer's clock, its
events, its sample list, the reply on its pipe (a candidate found the worker's `timer.Clock`
through `gc` and made it run 20 times slow: 17x unearned). This process is out of its reach, so
the worker's account is held against what is seen from here:

- `timing_unaccounted`: the timed request, as this process sees it (the worker's CPU time on the
  CPU, its own clock on the GPU), must be the samples plus what the loop around the calls costs.
  That cost is measured on the same loop run by the reference's worker, where no candidate code
  runs, with a call that does nothing (`LoopCost`); more than `unaccounted_factor` times it, plus
  `unaccounted_slack_ms`, was work done outside the timed regions or a clock that lies. The
  worker's clock readings of each call (`stamps_ns`, host CLOCK_MONOTONIC, the clock this
  process reads too) must also fall inside the request, in order, and agree with the samples.
- `background_thread`: a thread (or process) that did not exist before the candidate's code was
  loaded and that used more CPU while the timed calls ran than the calls lasted worked between
  calls, after `forward` had returned. An idle thread (blocked, sleeping) uses none.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field

import psutil

from ..core.result import Violation
from ..system.proc_tree import tree_pids

UNACCOUNTED = "timing_unaccounted"
THREADS = "background_thread"

_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
# A timed call's event time may exceed its host span by clock-rate differences between the device
# and the host, never by more than this.
GPU_SPAN_TOLERANCE_NS = 20_000
# The worker rounds a CPU sample to float milliseconds; its span is integer nanoseconds.
CPU_SPAN_TOLERANCE_NS = 2_000


def _run_ns(pid: int, tid: int) -> int | None:
    """A thread's time on a CPU: from schedstat (nanoseconds); from stat's utime+stime (clock
    ticks) where the kernel keeps no schedstat. None once the thread has ended."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
            return int(schedstat.read().split()[0])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * _TICK_NS
    except (OSError, ValueError, IndexError):
        return None


def _innermost_tid(pid: int, tid: int) -> int | None:
    """The thread's id in its own PID namespace (the last of `NSpid`), what the worker itself
    lists in its private /proc."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return tid


def _process_cpu_ns(pid: int) -> int | None:
    """Every thread's CPU time of the process, ended threads included (stat's utime+stime)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * _TICK_NS
    except (OSError, ValueError, IndexError):
        return None


def _runqueue_wait_ns(pid: int, tid: int) -> int:
    """How long the thread has waited, runnable, for a CPU another process held (schedstat's
    second field); 0 where the kernel keeps no schedstat."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
            return int(schedstat.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class Snapshot:
    serving: int
    run_ns: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, host tid) -> CPU time
    inner_tids: dict[int, int] = field(default_factory=dict)  # the serving process's: host tid -> own tid
    serving_cpu_ns: int | None = None
    # The serving thread's time runnable but preempted (other processes on its CPU): on the GPU,
    # wall time that is neither the calls nor the loop's work.
    serving_wait_ns: int = 0


def snapshot(serving: int, with_tree: bool = True) -> Snapshot:
    """The serving process's threads (and with `with_tree` every process below it), now."""
    taken = Snapshot(serving)
    try:
        pids = tree_pids(serving) if with_tree else [serving]
    except psutil.Error:
        return taken
    for pid in pids:
        try:
            tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except (OSError, ValueError):
            continue
        for tid in tids:
            used = _run_ns(pid, tid)
            if used is not None:
                taken.run_ns[(pid, tid)] = used
            if pid == serving and tid not in taken.inner_tids:
                inner = _innermost_tid(pid, tid)
                if inner is not None:
                    taken.inner_tids[tid] = inner
    taken.serving_cpu_ns = _process_cpu_ns(serving)
    taken.serving_wait_ns = _runqueue_wait_ns(serving, serving)
    return taken


# -- the loop's own cost, and the candidate's account against it ----------------------------------


@dataclass
class LoopCost:
    """What the timed loop costs around its calls, measured on the reference's worker with a call
    that does nothing: per call (refill, seed, flush, output copies, and on the GPU the part of
    each call's host span its events leave out) and once per request (before the first call,
    after the last, the pipe). On the CPU in the serving thread's CPU time: what the loop's own
    work costs, however loaded the machine is (its waits for a CPU are not in it); on the GPU in
    wall time, since the loop waits for the device."""

    per_call_ns: float
    fixed_ns: float


def wall_loop_cost(window_ns: tuple[int, int], samples_ms: list[float], stamps_ns: list,
                   loop_end_ns: int | None = None) -> LoopCost:
    """From a request this process timed (`window_ns`) and the trusted worker's own samples and
    stamps. `loop_end_ns`, the worker's clock when its loop ended, cuts the window there: what
    the worker did after the loop (giving its device memory back: cudaFree of the staged sets,
    200-3000 ms for large ones on the H200) is not part of the loop, and counted in the loop's
    cost it let a slowed clock hide 139 ms behind an allowance of 156)."""
    if loop_end_ns is not None and window_ns[0] < loop_end_ns < window_ns[1]:
        window_ns = (window_ns[0], loop_end_ns)
    samples = [round(ms * 1e6) for ms in samples_ms]
    spans = [end - start for start, end in stamps_ns]
    around = [(stamps_ns[i + 1][0] - stamps_ns[i][1]) + (spans[i] - samples[i]) for i in range(len(stamps_ns) - 1)]
    per_call = statistics.median(around) if around else 0.0
    unaccounted = (window_ns[1] - window_ns[0]) - sum(samples)
    return LoopCost(max(per_call, 0.0), max(unaccounted - per_call * len(around), 0.0))


def cpu_loop_cost(loop_cpu_ns: int, calls: int) -> LoopCost:
    """From the trusted worker's own CPU time over its loop (its calls do nothing)."""
    return LoopCost(loop_cpu_ns / max(calls, 1), 0.0)


def stamps_problem(window_ns: tuple[int, int], calls: int, samples_ms: object, stamps_ns: object,
                   device: str) -> str | None:
    """Why the worker's samples and clock readings of its `calls` timed calls cannot be true, or
    None."""
    if not (isinstance(samples_ms, list) and len(samples_ms) == calls
            and all(type(sample) in (int, float) and 0 <= sample < math.inf for sample in samples_ms)):
        return f"the worker did not send {calls} durations for its {calls} timed calls"
    if not isinstance(stamps_ns, list) or len(stamps_ns) != len(samples_ms):
        return "the worker sent no clock reading for each timed call"
    previous_end = window_ns[0]
    for index, (pair, sample_ms) in enumerate(zip(stamps_ns, samples_ms, strict=True)):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(type(value) is int for value in pair)):
            return f"timed call {index}'s clock readings are not two integers"
        start, end = pair
        if not previous_end <= start <= end <= window_ns[1]:
            return (f"timed call {index} ran from {start} to {end} ns by the worker's clock, outside the request or "
                    f"out of order (the request ran from {window_ns[0]} to {window_ns[1]} ns by the evaluator's)")
        sample_ns, span_ns = sample_ms * 1e6, end - start
        if device == "cpu" and abs(sample_ns - span_ns) > CPU_SPAN_TOLERANCE_NS:
            return f"timed call {index} was reported as {sample_ms:.4f} ms, but its clock readings are {span_ns} ns apart"
        if device != "cpu" and sample_ns > span_ns * 1.01 + GPU_SPAN_TOLERANCE_NS:
            return (f"timed call {index} was reported as {sample_ms:.4f} ms, longer than the {span_ns / 1e6:.4f} ms "
                    "between its clock readings")
        previous_end = end
    return None


@dataclass
class Account:
    """The candidate's timed request as this process saw it (Result.timed_request). The
    unaccounted time is kept in LoopCost's basis: on the CPU the serving thread's CPU time less
    the samples (a call cannot use more CPU than it lasted, so what is left was used between the
    calls), on the GPU the wall time less the samples."""

    wall_ms: float  # the request by this process's clock
    cpu_ms: float  # the worker's serving thread's CPU time meanwhile
    samples_ms: float  # what the worker reported, summed
    unaccounted_ms: float  # less the samples: the loop around the calls, and anything hidden there
    allowed_ms: float  # what the loop may cost (LoopCost, factor and slack)
    new_threads_cpu_ms: float = 0.0  # CPU of the candidate's own threads while the calls ran
    # On the GPU: the serving thread's time runnable but preempted meanwhile, left out of
    # unaccounted_ms (a loaded host, not the candidate's work; its own busy threads would be
    # background_thread).
    preempted_ms: float = 0.0

    def rounded(self) -> dict[str, float]:
        return {name: round(value, 4) for name, value in vars(self).items()}


def account(device: str, window_ns: tuple[int, int], before: Snapshot, after: Snapshot, samples_ms: list[float],
            cost: LoopCost, factor: float, slack_ms: float) -> Account:
    wall_ms = (window_ns[1] - window_ns[0]) / 1e6
    key = (after.serving, after.serving)
    cpu_ms = (after.run_ns.get(key, 0) - before.run_ns.get(key, 0)) / 1e6
    samples = sum(samples_ms)
    allowed_ms = factor * (len(samples_ms) * cost.per_call_ns + cost.fixed_ns) / 1e6 + slack_ms
    if device == "cpu":  # CPU time: a preempted thread uses none
        return Account(wall_ms, cpu_ms, samples, cpu_ms - samples, allowed_ms)
    preempted_ms = max(after.serving_wait_ns - before.serving_wait_ns, 0) / 1e6
    return Account(wall_ms, cpu_ms, samples, wall_ms - samples - preempted_ms, allowed_ms, preempted_ms=preempted_ms)


def unaccounted_violation(found: Account, device: str) -> Violation | None:
    if found.unaccounted_ms <= found.allowed_ms:
        return None
    seen = (f"the worker's thread used {found.cpu_ms:.3f} ms of CPU" if device == "cpu"
            else f"the evaluator's own clock saw {found.wall_ms:.3f} ms"
                 + (f" ({found.preempted_ms:.3f} ms of it preempted, left out)" if found.preempted_ms else ""))
    return Violation(UNACCOUNTED, (
        f"the timed calls were reported as {found.samples_ms:.3f} ms in all, but {seen} for them: "
        f"{found.unaccounted_ms:.3f} ms outside the timed regions, where the loop around the calls costs at most "
        f"{found.allowed_ms:.3f} ms (work done after the clock stopped, or a clock the candidate changed)"))


# -- threads the candidate started ------------------------------------------------------------------


def _new_threads_cpu(before: Snapshot, after: Snapshot, known_tids: set[int],
                     with_ended: bool) -> tuple[int, tuple[str, int] | None]:
    """(CPU nanoseconds every thread and process that did not exist before the candidate's code was
    loaded used between the snapshots, (who, nanoseconds) of the busiest). `with_ended`: threads
    that ended meanwhile too, from the process's total (in clock ticks, so two ticks less)."""
    serving = after.serving
    total_ns, busiest = 0, None
    live_serving_ns = 0
    for (pid, tid), run_ns in after.run_ns.items():
        used = run_ns - before.run_ns.get((pid, tid), 0)
        if pid == serving:
            live_serving_ns += used
            if after.inner_tids.get(tid, before.inner_tids.get(tid)) in known_tids:
                continue
        total_ns += used
        if busiest is None or used > busiest[1]:
            busiest = (f"thread {after.inner_tids.get(tid, tid)} of process {pid}", used)
    if with_ended and before.serving_cpu_ns is not None and after.serving_cpu_ns is not None:
        ended_ns = after.serving_cpu_ns - before.serving_cpu_ns - live_serving_ns - 2 * _TICK_NS
        total_ns += max(ended_ns, 0)
        if busiest is None or ended_ns > busiest[1]:
            busiest = ("threads that ended meanwhile", ended_ns)
    return total_ns, busiest


def new_threads_violation(before: Snapshot, after: Snapshot, known_tids: set[int], spans_ns: int, calls: int,
                          slack_ms: float, per_call_slack_ms: float) -> tuple[float, Violation | None]:
    """(CPU milliseconds used while the calls ran by the candidate's own threads and processes, the
    violation if one of them used more than the calls lasted, `spans_ns`, plus the slacks)."""
    total_ns, busiest = _new_threads_cpu(before, after, known_tids, with_ended=True)
    if busiest is None or busiest[1] <= spans_ns + (slack_ms + calls * per_call_slack_ms) * 1e6:
        return total_ns / 1e6, None
    who, used = busiest
    return total_ns / 1e6, Violation(THREADS, (
        f"{who}, started by the candidate's code, used {used / 1e6:.3f} ms of CPU while the timed calls ran, more "
        f"than the {spans_ns / 1e6:.3f} ms they lasted: it worked between the calls, after forward had returned"))


def idle_threads_violation(after_calls: Snapshot, later: Snapshot, known_tids: set[int], idle_ms: float,
                           slack_ms: float) -> Violation | None:
    """After the last timed call, while the worker waits for its next request (`idle_ms` between the
    snapshots) no call runs at all: a thread of the candidate's that uses more than `slack_ms` of
    CPU then works outside the calls, however loaded the machine (threads that ended meanwhile are
    known only in clock ticks, so only live ones count here)."""
    _, busiest = _new_threads_cpu(after_calls, later, known_tids, with_ended=False)
    if busiest is None or busiest[1] <= slack_ms * 1e6:
        return None
    who, used = busiest
    return Violation(THREADS, (
        f"{who}, started by the candidate's code, used {used / 1e6:.3f} ms of CPU in the {idle_ms:.0f} ms after the "
        "last timed call, while no call ran: it works after forward has returned"))
