"""One device's memory among the evaluations that share it: no verdict from memory another holds.

Every evaluation holds its device's gate shared while it runs, and registers what it reserved (its
footprint, footprints.py). An evaluation that ran out of memory while another shared the device is
retried holding the gate alone (`Gate.alone`): that waits for the running evaluations to end and
keeps new ones from starting meanwhile (a turnstile, so a waiting retry is never starved by a
stream of new shared holders). Under the "admit" policy an evaluation, once its workers have
started (the candidate builds meanwhile) and before its reference draws a set, waits until the
free memory, device and host, less what admitted pairs reserved and have not yet taken, covers
its footprint (`Hold.admit`): known from its problem's earlier runs, else sized by its reference
on the meta device; a pair of unknown size is admitted at once. A pair that fits passes one that
waits for room, unless that one has waited longer than ADMISSION_FAIR_S: its need is then set
aside first, but for pairs SMALL_BESIDE times smaller than it while a large pair it waits for runs.

The host's memory and /dev/shm are one machine's, whatever GPU a pair runs on: an admission counts
what the pairs of every device's gate reserved of them and have not taken (a run over several
GPUs, or one run per GPU, shares them). Every evaluating process of the machine meets at one
directory per device (`gate_root`), beside
the timing locks' directory and not in it: the sandbox lets candidates write there, and a
candidate must neither hold the gate nor forge a reservation. Holding the gate alone does not
evict what lives outside an evaluation: another evaluating process's kept reference
(reference_batch.py: its model and CUDA context) or a non-evaluator program on the same GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.step_seconds import StepSeconds
from .footprints import Footprint

# How often a waiting pair looks at the free memory again, and the longest it waits for room (a
# pair stuck until its timeouts must not hold the rest longer than this): then it starts anyway,
# and a retry with the device to itself is the backstop.
ADMISSION_POLL_S = 0.5
ADMISSION_WAIT_S = 900.0
# A pair waiting for room longer than this is served first: pairs that come after it are
# admitted only into what room its footprint leaves.
ADMISSION_FAIR_S = 30.0
# ... except a pair this many times smaller than it, device and host, while a large pair it waits
# for runs (_passes).
SMALL_BESIDE = 8
# Host memory an admission leaves free beyond the pairs' footprints, as a share of the machine's:
# what the run's other processes grow by meanwhile (each worker's zygote, reference and candidate
# processes, a next candidate started ahead), which no footprint counts (#38: on the H100 machine,
# 125 GiB for 16 workers, the kernel's OOM killer ended pairs admitted into the last few GiB).
HOST_HEADROOM_SHARE = 0.10


@dataclass
class Reservation:
    device_bytes: int = 0
    host_bytes: int = 0
    # Still growing toward its footprint: true until its correctness calls are checked (the
    # candidate's peak, memory that free memory does not show yet); then what it holds is in
    # the free memory already.
    pending: bool = True
    problem: str = ""
    # Through admission (always, under the "retry" policy): only admitted pairs' reservations
    # count against the next admission, and an admission waits only while one of them runs.
    admitted: bool = True
    # The pair's processes (the evaluating one, its reference's and its candidate's workers):
    # what they hold already shows in the free memory, so a pending reservation counts against
    # the next admission only for the rest (`still_to_take`).
    pids: list[int] = dataclasses.field(default_factory=list)
    # Waiting for room since (time.time(); 0: not waiting): its sizes are then the room it needs.
    waiting_since: float = 0.0


def free_memory(device: str) -> tuple[int | None, int]:
    """(free device bytes, or None where NVML cannot say; available host bytes)."""
    from ..system.host_memory import available_bytes

    device_free = None
    if device == "cuda":
        try:
            from ..system.envinfo import _nvml, _visible_nvml_handle

            pynvml = _nvml()
            device_free = int(pynvml.nvmlDeviceGetMemoryInfo(_visible_nvml_handle(pynvml)).free)
        except Exception:  # noqa: BLE001 - no NVML: admission by host memory only
            device_free = None
    return device_free, available_bytes()


def host_headroom() -> int:
    """Bytes of host memory an admission by footprint leaves free (HOST_HEADROOM_SHARE)."""
    from ..system.host_memory import total_bytes

    return int(HOST_HEADROOM_SHARE * total_bytes())


def still_to_take(pending: list[Reservation], device: str) -> tuple[int, int]:
    """(device bytes, host bytes) that pending pairs reserved and have not taken yet. What a
    pair's processes hold already is out of the free memory; counting it again as reserved made
    pairs wait 120-260 s each for room that was there (#38, H100, 250 identity pairs at 16 workers).
    A pair whose processes cannot be read (NVML cannot name them: another PID namespace) counts
    whole, as before."""
    device_held = device_memory_by_process() if device == "cuda" and any(r.device_bytes for r in pending) else {}
    device_rest = host_rest = 0
    for reservation in pending:
        taken_device = sum(device_held.get(pid, 0) for pid in reservation.pids)
        taken_host = sum(shared_memory_held(pid) for pid in reservation.pids)
        device_rest += max(0, reservation.device_bytes - taken_device)
        host_rest += max(0, reservation.host_bytes - taken_host)
    return device_rest, host_rest


def device_memory_by_process() -> dict[int, int]:
    """Device bytes each process uses on the visible GPU, by PID, as NVML reports them ({} where
    it cannot)."""
    try:
        from ..system.envinfo import _nvml, _visible_nvml_handle

        pynvml = _nvml()
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(_visible_nvml_handle(pynvml))
    except Exception:  # noqa: BLE001 - no NVML: nothing taken is known
        return {}
    held: dict[int, int] = {}
    for process in processes:
        used = getattr(process, "usedGpuMemory", None)
        if isinstance(used, int):
            held[process.pid] = held.get(process.pid, 0) + used
    return held


def shared_memory_held(pid: int) -> int:
    """The shared memory a process maps, its proportional share of each page (the sets live in
    /dev/shm and are mapped by the evaluating process and a worker both): Pss_Shmem of
    /proc/PID/smaps_rollup, or RssShmem where the kernel has no such line; 0 for a process gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss_Shmem:"):
                return int(line.split()[1]) * 1024
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssShmem:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def shared_memory_free() -> int | None:
    """Free bytes of the host's /dev/shm (None where there is none): the sets a pair's reference
    draws, and the copies lent to its candidate, live there (shared_tensors.py), and it is often
    smaller than the host's memory (half of it by default, 64 MiB in a default container)."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def device_key(device: str) -> str:
    """The gate's name for the device, read without starting CUDA (NVML's UUID of the visible GPU)."""
    if device != "cuda":
        return "host"
    from ..system.envinfo import gpu_info

    uuid = gpu_info().get("gpu_uuid")
    if uuid:
        return uuid
    return "cuda-" + (os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0")


def gate_root() -> Path:
    """Where the machine's evaluating processes meet: beside locks.lock_dir() (CUDAAGENT_LOCK_DIR)."""
    from ..timing.locks import lock_dir

    return lock_dir().parent / "cudaagent-memory-gate"


class Gate:
    def __init__(self, device: str, root: Path | None = None):
        self.device = device
        self.root = Path(root or gate_root()) / device_key(device)
        self.holders = self.root / "holders"
        self.holders.mkdir(parents=True, exist_ok=True)

    # -- holding the gate -----------------------------------------------------------------------

    @contextlib.contextmanager
    def shared(self, policy: str, problem: str = "") -> Iterator[Hold]:
        """Held while an evaluation runs beside others; under "admit" it is admitted later, by
        its footprint (`Hold.admit`)."""
        started = time.perf_counter()
        hold = self._register(Reservation(problem=problem, admitted=policy != "admit", pids=[os.getpid()]),
                              alone=False)
        hold.admits = policy == "admit"
        try:
            with open(self.root / "turnstile.lock", "a+") as turnstile, open(self.root / "gate.lock", "a+") as gate:
                fcntl.flock(turnstile, fcntl.LOCK_EX)  # behind a retry that waits to hold it alone
                try:
                    fcntl.flock(gate, fcntl.LOCK_SH)
                finally:
                    fcntl.flock(turnstile, fcntl.LOCK_UN)
                hold.waited_s += time.perf_counter() - started
                yield hold
        finally:
            hold.release()

    @contextlib.contextmanager
    def alone(self, problem: str = "") -> Iterator[Hold]:
        """The device to itself: waits for every running evaluation to end; new ones wait."""
        started = time.perf_counter()
        # Not admitted while it waits: a pair waiting for room ahead of it must not wait for it
        # too (it waits for that pair's shared hold to end).
        hold = self._register(Reservation(problem=problem, admitted=False, pids=[os.getpid()]), alone=True)
        try:
            with open(self.root / "turnstile.lock", "a+") as turnstile, open(self.root / "gate.lock", "a+") as gate:
                fcntl.flock(turnstile, fcntl.LOCK_EX)
                try:
                    fcntl.flock(gate, fcntl.LOCK_EX)
                finally:
                    fcntl.flock(turnstile, fcntl.LOCK_UN)
                hold.waited_s += time.perf_counter() - started
                hold.reserve(None, admitted=True)
                yield hold
        finally:
            hold.release()

    def waiting_alone(self) -> bool:
        """Whether a retry now waits for the gate alone (it holds the turnstile)."""
        with open(self.root / "turnstile.lock", "a+") as turnstile:
            try:
                fcntl.flock(turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            return False

    # -- admission ------------------------------------------------------------------------------

    def _fits(self, footprint: Footprint, holder: str, waiting_since: float) -> str | None:
        """How the footprint is admitted now ("alone on the device", "by footprint"), or None:
        the free memory, device, host and /dev/shm, less what admitted pairs reserved and have
        not taken yet, and less the footprints of pairs that have waited longer than
        ADMISSION_FAIR_S and longer than this one (so a large pair is not starved by a stream of
        small ones, while small ones still pass a large one that waits for room)."""
        running = self.running(besides=holder)
        admitted = [other for other in running if other.admitted]
        starving = [other for other in running if not other.admitted and other.waiting_since
                    and other.waiting_since < waiting_since and time.time() - other.waiting_since > ADMISSION_FAIR_S]
        # The other GPUs' pairs share this machine's host memory and /dev/shm: what they reserved
        # and have not taken counts here too (#38: four GPUs of one host, each admitting by its
        # own gate alone, overcommitted 512 GiB and the kernel's OOM killer took references).
        elsewhere = [other for other in self.running_on_other_devices() if other.admitted and other.pending]
        # A small pair passes a starving one while a large pair it waits for still runs: it takes
        # little of the room the starving one needs and is done long before (level 2 and 3 pairs
        # waited 100-370 s behind each 100 GiB level-1 pair on the H200 otherwise, #38). Once only
        # small pairs stand in its way, they wait too, or a stream of them would starve it.
        starving = [other for other in starving if not _passes(footprint, other, admitted)]
        alone_here = not admitted and not starving
        if alone_here and not elsewhere:
            return "alone on the device"
        device_free, host_free = free_memory(self.device)
        pending_device, pending_host = still_to_take([other for other in admitted if other.pending], self.device)
        pending_host += still_to_take(elsewhere, "host")[1]
        pending_device += sum(other.device_bytes for other in starving)
        pending_host += sum(other.host_bytes for other in starving)
        device_room = None if device_free is None else device_free - pending_device
        host_room = host_free - pending_host - host_headroom()
        # The footprint's host bytes are shared memory: /dev/shm must hold them too.
        shm_free = shared_memory_free()
        shm_room = None if shm_free is None else shm_free - pending_host
        # Alone on its device, a pair needs no device room beside anyone: a footprint larger than
        # the device's free memory (a level-1 pair's nine held 6 GiB outputs on an 80 GiB H100)
        # fits only so, and other GPUs' pairs are no reason to wait for it.
        device_fits = alone_here or device_room is None or device_room >= footprint.device_bytes
        if device_fits and host_room >= footprint.host_bytes and (shm_room is None or shm_room >= footprint.host_bytes):
            return "by footprint"
        return None

    # -- the registry of running evaluations ----------------------------------------------------

    def running(self, besides: str | None = None) -> list[Reservation]:
        """Every live holder's reservation but `besides`; a holder whose process died is removed."""
        return _running(self.holders, besides)

    def running_on_other_devices(self) -> list[Reservation]:
        """The live reservations at the other devices' gates of this machine (gate_root)."""
        found: list[Reservation] = []
        for other in self.root.parent.iterdir():
            if other != self.root and (other / "holders").is_dir():
                found += _running(other / "holders", None)
        return found

    def _register(self, reservation: Reservation, alone: bool) -> Hold:
        holder = f"{os.getpid()}-{secrets.token_hex(4)}"
        data = self.holders / f"{holder}.json"
        _write(data, reservation)
        # Locked before it is named, so no one sees it unlocked and removes it as stale.
        hidden = self.holders / f".{holder}.lock"
        handle = open(hidden, "a+")  # noqa: SIM115 - held until Hold.release
        fcntl.flock(handle, fcntl.LOCK_EX)
        with self._lock("registry.lock"):
            others = len(self.running(besides=holder))
            generation = self._generation(advance=True)
            hidden.rename(self.holders / f"{holder}.lock")
        return Hold(self, holder, handle, reservation, alone, others, generation)

    def _generation(self, advance: bool = False) -> int:
        """How many evaluations have registered here (a counter, advanced under registry.lock)."""
        path = self.root / "generation"
        try:
            count = int(path.read_text() or 0)
        except (OSError, ValueError):
            count = 0
        if advance:
            count += 1
            temporary = path.with_name(f"generation.{os.getpid()}.tmp")
            temporary.write_text(str(count))
            temporary.replace(path)
        return count

    @contextlib.contextmanager
    def _lock(self, name: str):
        with open(self.root / name, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


class Hold:
    """An evaluation's place at the gate: what it reserved, and whom it shared the device with."""

    def __init__(self, gate: Gate, holder: str, handle, reservation: Reservation, alone: bool, others: int,
                 generation: int):
        self.gate = gate
        self.holder = holder
        self._handle = handle
        self.reservation = reservation
        self.alone = alone
        self.others_at_start = others
        self.generation = generation
        self.admits = False  # waits for room by footprint (the "admit" policy, shared)
        self.waited_s = 0.0  # for the gate, and for room (admit)
        self.admitted = "alone" if alone else "no admission (retry policy)"
        # Where admit's time went (Result.profile's "parent.admission.<step>"): waiting for the
        # admission lock, looking at the free memory and the others' reservations under it
        # (NVML, each admitted pair's /proc/PID/smaps_rollup), writing this pair's reservation,
        # sleeping between looks. #41: 0.21 s median per evaluation in a batch of eight on the H200.
        self.admission_steps = StepSeconds()

    def admit(self, footprint: Footprint | None) -> None:
        """Under the "admit" policy, waits until the footprint fits beside the admitted pairs'
        reservations; then (or at once) reserves it. Each look at the free memory, and the
        reservation that follows it, is made under the admission lock (two pairs must not both
        take the same room); the waits between looks are not, so a pair that fits is not held
        up by one that does not (a 32 GiB level-1 pair waiting for room kept every small pair
        of the identity set waiting 90-480 s behind it on the H200, #38)."""
        steps = self.admission_steps
        if not (self.admits and not self.reservation.admitted):
            if footprint is not None:
                with steps("reserve"):
                    self.reserve(footprint)
            return
        started = time.perf_counter()
        if footprint is None:
            self.admitted = "unknown footprint: not waited for"
            with steps("reserve"):
                self.reserve(None, admitted=True)
            return
        waiting_since = time.time()
        while True:
            asked = time.perf_counter()
            with self.gate._lock("admission.lock"):
                steps.add("lock_wait", time.perf_counter() - asked)
                with steps("look"):
                    how = self.gate._fits(footprint, self.holder, waiting_since)
                waited = time.perf_counter() - started
                if how is None and waited > ADMISSION_WAIT_S:
                    how = f"without room after waiting {ADMISSION_WAIT_S:.0f} s"
                if how is not None:
                    self.admitted = how
                    with steps("reserve"):
                        self.reserve(footprint, admitted=True, waiting_since=0.0)  # one write: admitted, no longer waiting
                    break
                if not self.reservation.waiting_since:  # its need, seen by those that come later
                    device_bytes, host_bytes = _sizes(footprint)
                    self._update(dataclasses.replace(self.reservation, device_bytes=device_bytes,
                                                     host_bytes=host_bytes, waiting_since=waiting_since))
            with steps("sleep"):
                time.sleep(ADMISSION_POLL_S)
        self.waited_s += time.perf_counter() - started

    def reserve(self, footprint: Footprint | None, admitted: bool | None = None,
                waiting_since: float | None = None) -> None:
        """The footprint, once known (and again once measured), for the next admissions."""
        device_bytes, host_bytes = _sizes(footprint)
        self._update(dataclasses.replace(
            self.reservation, device_bytes=device_bytes, host_bytes=host_bytes,
            admitted=self.reservation.admitted if admitted is None else admitted,
            waiting_since=self.reservation.waiting_since if waiting_since is None else waiting_since))

    def note_processes(self, pids: list[int]) -> None:
        """The pair's worker processes, whose memory counts as taken from its reservation."""
        known = list(dict.fromkeys([*self.reservation.pids, *pids]))
        if known != self.reservation.pids:
            self._update(dataclasses.replace(self.reservation, pids=known))

    def settle(self) -> None:
        """Its correctness calls are checked: what it holds now shows in the free memory."""
        if self.reservation.pending:
            self._update(dataclasses.replace(self.reservation, pending=False))

    def _update(self, reservation: Reservation) -> None:
        self.reservation = reservation
        if self._handle is not None:
            _write(self.gate.holders / f"{self.holder}.json", reservation)

    def shared_with(self) -> int:
        """Other evaluations that held the gate at some time during this hold: those there when
        it began, those there now, and one at least if any registered since."""
        now = len(self.gate.running(besides=self.holder))
        later = 1 if self.gate._generation() > self.generation else 0
        return max(self.others_at_start, now, later)

    def release(self) -> None:
        if self._handle is None:
            return
        for path in (self.gate.holders / f"{self.holder}.lock", self.gate.holders / f"{self.holder}.json"):
            path.unlink(missing_ok=True)
        self._handle.close()
        self._handle = None


def _small_beside(first: Footprint | Reservation, second: Reservation) -> bool:
    """Whether `first` needs at most 1/SMALL_BESIDE of what `second` needs, device and host."""
    return (first.device_bytes * SMALL_BESIDE <= second.device_bytes
            and first.host_bytes * SMALL_BESIDE <= second.host_bytes)


def _passes(newcomer: Footprint, starving: Reservation, admitted: list[Reservation]) -> bool:
    """Whether a newcomer is admitted without the room a starving pair needs set aside: it is
    small beside that pair, and an admitted pair that is not (one the starving pair must wait for
    anyway) still runs."""
    return _small_beside(newcomer, starving) and any(not _small_beside(other, starving) for other in admitted)


def _running(holders: Path, besides: str | None) -> list[Reservation]:
    """Every live holder's reservation in a gate's holders folder but `besides`; a holder whose
    process died is removed."""
    found = []
    for lock_path in holders.glob("*.lock"):
        holder = lock_path.stem
        if holder == besides or holder.startswith("."):  # a hidden one is still being registered
            continue
        state = _holder_state(lock_path)
        if state == "dead":
            for stale in (lock_path, lock_path.with_suffix(".json")):
                stale.unlink(missing_ok=True)
        if state != "alive":
            continue
        try:
            found.append(Reservation(**json.loads(lock_path.with_suffix(".json").read_text())))
        except (OSError, ValueError, TypeError):  # being rewritten: counted, its sizes unknown
            found.append(Reservation())
    return found


def _sizes(footprint: Footprint | None) -> tuple[int, int]:
    return (footprint.device_bytes, footprint.host_bytes) if footprint is not None else (0, 0)


def _holder_state(lock_path: Path) -> str:
    """"alive" while its process holds its lock, "dead" once the kernel released it with the
    process, "gone" when released and removed meanwhile."""
    try:
        with open(lock_path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return "alive"
            fcntl.flock(handle, fcntl.LOCK_UN)
            return "dead"
    except FileNotFoundError:
        return "gone"


def _write(path: Path, reservation: Reservation) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(dataclasses.asdict(reservation)))
    temporary.replace(path)
