"""Keeps the host quiet for a timed call: a few cores are reserved for whichever process holds a
device's timing lock, and every other process of the run (builds, correctness checks, references,
the evaluating processes) stays off them.

Every worker process moves itself onto the untimed cores when it starts (`untimed_worker`), and
its compilers inherit that. The lock's holder moves all its threads onto the reserved cores for
the hold and back afterwards (`timed_hold`, entered by `locks.device_lock`), taking along any
process it started meanwhile. Nothing else has to be restored when a holder dies: the others were
never on its cores. A launch-bound call waits for no core however busy the batch is; the price is
the reserved cores' share of the machine, lost to builds (README, "What a timed call includes").

The split is computed the same way in every process of a run, from the CPUs and GPUs recorded in
the environment by the first of them (`record_host`), before any worker starts.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..system.cores import cap_torch_threads

# "cpus|gpus": the CPUs the run may use and the GPUs it times on, as the first process saw them.
HOST_ENV = "CUDAAGENT_HOST_PLAN"
TOPOLOGY = Path("/sys/devices/system/cpu")

# Reserved CPUs per timed device in this process (untimed_worker): a count, None for the
# machine's own (automatic_count), 0 for none.
_reserved_here: dict = {"count": 0}
_THIS_PROCESS = object()  # timed_hold: the count untimed_worker set here


def automatic_count(cores: int) -> int:
    """CPUs reserved per device where none is configured: 2 from eight cores on (the H100
    machine's 16: a launch and the driver's threads), 1 from four, none below, where one core
    less for the builds and checks (the tests' 2-core machine: half of it) costs more than a
    quiet core buys."""
    return 2 if cores >= 8 else 1 if cores >= 4 else 0


@dataclass(frozen=True)
class HostPlan:
    cpus: tuple[int, ...]  # the run's CPUs
    gpus: tuple[str, ...]  # the run's GPUs (CUDA_VISIBLE_DEVICES entries), one reserved set each

    def reserved(self, slot: int, count: int | None) -> frozenset[int]:
        """The CPUs reserved for the timings of device `slot` (0 for the CPU backend): `count`
        logical CPUs (None: automatic_count) rounded up to whole cores (a build on a core's other
        hardware thread would share its pipeline), taken from the highest-numbered cores, one
        block per device; fewer where the run has too few cores to keep one for untimed work,
        none where it has one."""
        cores = _cores(self.cpus, TOPOLOGY)
        if count is None:
            count = automatic_count(len(cores))
        if count <= 0 or not cores:
            return frozenset()
        slots = max(1, len(self.gpus))
        per_slot = min(-(-count // len(cores[0])), (len(cores) - 1) // slots)
        if per_slot <= 0:
            return frozenset()
        start = len(cores) - per_slot * (min(slot, slots - 1) + 1)
        return frozenset(cpu for core in cores[start:start + per_slot] for cpu in core)

    def untimed(self, count: int | None) -> frozenset[int]:
        """Every CPU of the run that no device's timing reserves."""
        reserved = set()
        for slot in range(max(1, len(self.gpus))):
            reserved |= self.reserved(slot, count)
        return frozenset(self.cpus) - reserved


@functools.lru_cache(maxsize=8)
def _cores(cpus: tuple[int, ...], topology: Path) -> list[tuple[int, ...]]:
    """The CPUs grouped by physical core (hardware threads together), cores in order of their
    lowest CPU; a CPU whose topology is unreadable is a core of its own. Read once per process
    (every timing's hold asks)."""
    wanted, cores, seen = set(cpus), [], set()
    for cpu in sorted(wanted):
        if cpu in seen:
            continue
        try:
            siblings = _parse_cpus((topology / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text())
        except (OSError, ValueError):
            siblings = [cpu]
        core = tuple(sorted((set(siblings) & wanted) | {cpu}))
        seen |= set(core)
        cores.append(core)
    return cores


def _parse_cpus(text: str) -> list[int]:
    """A kernel CPU list ("0-3,8,10-11")."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def record_host(gpus: Iterable[str] | None = None) -> HostPlan:
    """The run's plan: read from the environment, or made from this process's CPUs (and `gpus`,
    or the visible ones) and written there for every process it starts. Call it before the
    first worker starts (channel.Worker does): a zygote keyed on the environment would start again
    if it changed later."""
    recorded = os.environ.get(HOST_ENV)
    if recorded:
        cpus, _, gpu_list = recorded.partition("|")
        return HostPlan(tuple(int(cpu) for cpu in cpus.split(",") if cpu),
                        tuple(gpu for gpu in gpu_list.split(",") if gpu))
    if gpus is None:
        from ..system.gpu_pinning import visible_gpus

        gpus = visible_gpus()
    plan = HostPlan(tuple(sorted(os.sched_getaffinity(0))), tuple(gpus))
    os.environ[HOST_ENV] = f"{','.join(map(str, plan.cpus))}|{','.join(plan.gpus)}"
    return plan


def device_slot(device: str, plan: HostPlan) -> int:
    """Which of the plan's GPUs this process times on (its CUDA_VISIBLE_DEVICES, pinned per test
    worker by gpu_pinning), 0 for the CPU backend or a GPU the plan does not list."""
    if not device.startswith("cuda"):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return plan.gpus.index(visible) if visible in plan.gpus else 0


def _reserved_for(device: str, reserved_cpus: int | None) -> frozenset[int]:
    """The CPUs the timings of `device` get on this machine (HostPlan.reserved); none with
    `reserved_cpus` 0 or where affinity cannot be set."""
    if reserved_cpus == 0 or not hasattr(os, "sched_setaffinity"):
        return frozenset()
    plan = record_host()
    return plan.reserved(device_slot(device, plan), reserved_cpus)


def timing_cpus(device: str, reserved_cpus: int | None) -> frozenset[int]:
    """The CPUs a timed process of `device` is held on: its reserved ones (_reserved_for); on the
    CPU backend of a machine too small for a reservation (automatic count, fewer than four cores),
    one CPU of the run (the top core's first), the same for every timed process and shared with
    untimed work. On the 2-core box a small call's speed was its process's, not its code's: an
    identity candidate of a 25 us tanh read 0.74-1.16x of eager unpinned, and 0.98-1.02x with
    candidate and eager on one CPU (#40). None with `reserved_cpus` 0."""
    reserved = _reserved_for(device, reserved_cpus)
    if reserved or device != "cpu" or reserved_cpus is not None or not hasattr(os, "sched_setaffinity"):
        return reserved
    cores = _cores(record_host().cpus, TOPOLOGY)
    return frozenset({cores[-1][0]}) if len(cores) > 1 else frozenset()


def reserves_cores(device: str, reserved_cpus: int | None) -> bool:
    """Whether the timings of `device` get CPUs of their own on this machine: not on one of
    fewer than four cores by default, nor with `reserved_cpus` 0."""
    return bool(_reserved_for(device, reserved_cpus))


def _tasks(pid: int) -> list[int]:
    try:
        return [int(task) for task in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def move_threads(pids: Iterable[int], cpus: Iterable[int]) -> int:
    """Every thread of each process onto `cpus`; returns how many were moved. Threads that end
    meanwhile, or that this process may not move, are left."""
    cpus, moved = set(cpus), 0
    for pid in pids:
        for task in _tasks(pid):
            try:
                os.sched_setaffinity(task, cpus)
                moved += 1
            except OSError:
                continue
    return moved


def move_tree(root: int, cpus: Iterable[int]) -> int:
    """`root`, its descendants and all their threads onto `cpus` (move_threads)."""
    from ..system.proc_tree import tree_pids

    try:
        pids = tree_pids(root)
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess: it has ended
        return 0
    return move_threads(pids, cpus)


def reserved_in(spec: dict) -> int | None:
    """The reserved CPUs a worker's spec asks for (its EvalConfig's TimingConfig, or a synthesis
    FilterConfig's `timing`, else the default: None, automatic); 0 for a run that times nothing."""
    from ..core.config import TimingConfig

    config = spec.get("config") or {}
    if config.get("timing") is False:
        return 0
    timing = config.get("timing_config") or (config["timing"] if isinstance(config.get("timing"), dict) else {})
    return timing.get("reserved_cpus", TimingConfig.reserved_cpus)


def untimed_worker(reserved_cpus: int | None) -> None:
    """In a process of the run that does untimed work (a worker, at its start; the evaluating
    process): stay off every device's reserved CPUs from now on, as will whatever it starts."""
    _reserved_here["count"] = reserved_cpus
    if reserved_cpus == 0 or not hasattr(os, "sched_setaffinity"):
        return
    plan = record_host()
    untimed = plan.untimed(reserved_cpus)
    # Its own threads only: processes it started already may be timing right now (the workers
    # of an evaluating process), and each of them moved itself when it started. Without a
    # reservation here nothing moves (a process pinned on purpose stays pinned).
    if untimed and untimed != frozenset(plan.cpus):
        move_threads([os.getpid()], untimed)


def fit_timed_threads(device: str) -> int | None:
    """In a timed process whose hold another process takes on its behalf (a candidate's worker:
    the evaluating process holds the lock, locks.device_lock's `on_behalf_of`), before its first
    timed request: on the CPU backend, torch's intra-op threads at most as many as its timing
    CPUs (the reserved ones, or the shared one: timing_cpus), as `timed_hold` makes them in a
    holder of its own. Not put back: every request of its after that but the staging runs under
    a hold, and an intra-op pool grown again starts threads the harness did not have before the
    candidate's code loaded (outside_view.py).
    Does nothing without timing CPUs. Returns the count before, where it fitted them (the
    reference's worker puts it back after measuring the candidate's loop the same way)."""
    if device != "cpu":
        return None
    held_on = timing_cpus(device, _reserved_here["count"])
    return cap_torch_threads(len(held_on)) if held_on else None


@contextmanager
def timed_hold(device: str, reserved_cpus=_THIS_PROCESS, pid: int | None = None):
    """Around a held timing lock: the timed process (`pid`, this one by default) and everything
    under it on the device's timing CPUs (its reserved ones, or the CPU backend's shared one:
    timing_cpus), then back on the untimed ones. On the CPU backend, in this process, torch's
    intra-op threads are at most as many as those CPUs meanwhile (more would take turns on them).
    Does nothing without them (`untimed_worker` never called, or 0)."""
    count = _reserved_here["count"] if reserved_cpus is _THIS_PROCESS else reserved_cpus
    held_on = timing_cpus(device, count)
    if not held_on:
        yield
        return
    untimed = record_host().untimed(count)
    root = os.getpid() if pid is None else pid
    move_tree(root, held_on)
    threads_before = cap_torch_threads(len(held_on)) if root == os.getpid() and device == "cpu" else None
    try:
        yield
    finally:
        if threads_before is not None:
            sys.modules["torch"].set_num_threads(threads_before)
        move_tree(root, untimed)
