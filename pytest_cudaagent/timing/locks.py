"""One timing at a time per device: a file lock shared by every process on the machine; and,
while a timing runs, no other untimed work of ours on that device (a shared "work" lock that the
timing takes exclusively, with a turnstile so waiting timings are not starved)."""

from __future__ import annotations

import fcntl
import os
import secrets
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .host_quiet import timed_hold
from .waits import describe_work, remove_note, waiting, write_note


def device_key(device: str) -> str:
    """A name for the physical device, the same in every process whatever CUDA_VISIBLE_DEVICES
    says, so two xdist workers pinned to one GPU take the same lock."""
    if device != "cuda":
        return "cpu"
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return f"gpu-{uuid}" if uuid is not None else f"gpu-{props.name}-{props.pci_bus_id}".replace(" ", "_")


def lock_dir() -> Path:
    """The timing locks' own directory: only the evaluating processes and the reference's workers
    open it; a sandboxed candidate can neither read nor write it (sandbox.py)."""
    return Path(os.environ.get("CUDAAGENT_LOCK_DIR", tempfile.gettempdir())) / "cudaagent-locks"


def lock_path(device: str) -> Path:
    return lock_dir() / f"cudaagent-timing-{device_key(device)}.lock"


@dataclass
class DeviceHold:
    path: Path
    quiet: bool  # no other untimed work of ours ran on the device during the hold
    # When not quiet: whose work it was (waits.describe_work), in words the Result can carry.
    beside: str = ""


def note_path(device: str) -> Path:
    """Who holds the timing lock now (waits.write_note)."""
    return lock_path(device).with_suffix(".holder")


def work_notes_dir(device: str) -> Path:
    """One note per process holding untimed work on the device."""
    return lock_path(device).with_suffix(".work.d")


def _flock_or_wait(handle, mode: int, what: str, note: Path | None = None, holders=None) -> None:
    """flock, at once if free; otherwise a wait that says what it waits for and who holds it."""
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    with waiting(what, note, holders):
        fcntl.flock(handle, mode)


# Devices whose timing lock this thread holds: untimed work inside a timing needs no lock of its
# own (and would wait for itself: flock locks of two open files conflict even in one process).
_timing_here = threading.local()


@contextmanager
def device_work(device: str):
    """Untimed work on the device (a correctness trial, the reference's outputs): held shared, so
    any number run together, but never while a timing holds the device (`device_lock`)."""
    if device in getattr(_timing_here, "devices", set()):
        yield
        return
    work, turnstile = _work_paths(device)
    what = f"the device ({device_key(device)}) while a timing runs"
    mine = work_notes_dir(device) / f"{os.getpid()}-{threading.get_ident()}.json"
    with open(turnstile, "a+") as turnstile_handle, open(work, "a+") as work_handle:
        # Behind a timing that is waiting, then beside the other untimed work.
        _flock_or_wait(turnstile_handle, fcntl.LOCK_EX, what, note_path(device))
        try:
            _flock_or_wait(work_handle, fcntl.LOCK_SH, what, note_path(device))
        finally:
            fcntl.flock(turnstile_handle, fcntl.LOCK_UN)
        mine.parent.mkdir(parents=True, exist_ok=True)
        write_note(mine)
        try:
            yield
        finally:
            remove_note(mine)
            fcntl.flock(work_handle, fcntl.LOCK_UN)


def _work_paths(device: str) -> tuple[Path, Path]:
    base = lock_path(device)
    base.parent.mkdir(parents=True, exist_ok=True)
    return base.with_suffix(".work"), base.with_suffix(".turnstile")


def _hold_work_exclusively(work_handle, turnstile_handle, wait_s: float) -> bool:
    """The work lock exclusively, waiting at most `wait_s` for its shared holders; new ones wait
    at the turnstile meanwhile. False: they did not finish in time."""
    fcntl.flock(turnstile_handle, fcntl.LOCK_EX)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(work_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.005)
    finally:
        fcntl.flock(turnstile_handle, fcntl.LOCK_UN)


@contextmanager
def device_lock(device: str, quiet_wait_s: float = 30.0, on_behalf_of: int | None = None):
    """Held for the whole of a timing: no other timing, and no untimed work of ours
    (`device_work`) unless that did not end within `quiet_wait_s` (TimingConfig.quiet_wait_s;
    DeviceHold.quiet is then False). The one place the timing lock is acquired: the evaluating
    process takes it on a candidate's worker's behalf (`on_behalf_of`: that process's pid), since
    a candidate that could open the lock directory could hold every other timing of the machine.
    The timed process (this one, or `on_behalf_of` and its descendants) is on the device's
    reserved CPUs for the hold (host_quiet.timed_hold).
    With CUDAAGENT_LOCK_LOG set, each hold is logged as `device holder acquired_ns released_ns`
    (holder `pid-token`, or `pid-token>worker_pid` on a worker's behalf) so a run can show that
    timings never overlapped."""
    path = lock_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    work, turnstile = _work_paths(device)
    with open(path, "a+") as handle, open(work, "a+") as work_handle, open(turnstile, "a+") as turnstile_handle:
        _flock_or_wait(handle, fcntl.LOCK_EX, f"the timing lock of {device_key(device)}", note_path(device))
        write_note(note_path(device), on_behalf_of)
        with waiting(f"other untimed work on {device_key(device)} to end before timing",
                     holders=lambda: describe_work(work_notes_dir(device))):
            quiet = _hold_work_exclusively(work_handle, turnstile_handle, quiet_wait_s)
        beside = "" if quiet else describe_work(work_notes_dir(device))
        acquired_ns = time.time_ns()
        held = _timing_here.__dict__.setdefault("devices", set())
        held.add(device)
        try:
            # The timed process alone on its reserved cores (host_quiet.py): this one, or the
            # worker it holds the lock for, with whatever that started.
            with timed_hold(device, pid=on_behalf_of):
                yield DeviceHold(path, quiet, beside)
        finally:
            held.discard(device)
            if quiet:
                fcntl.flock(work_handle, fcntl.LOCK_UN)
            released_ns = time.time_ns()
            remove_note(note_path(device))
            fcntl.flock(handle, fcntl.LOCK_UN)
            log = os.environ.get("CUDAAGENT_LOCK_LOG")
            if log:
                with open(log, "a") as log_handle:
                    holder = holder_id() if on_behalf_of is None else f"{holder_id()}>{on_behalf_of}"
                    log_handle.write(f"{device_key(device)} {holder} {acquired_ns} {released_ns}\n")


def holder_id() -> str:
    """This process, told apart from every other: `pid-token`. A sandboxed worker is PID 1 of its
    own PID namespace, and a namespace's inode number is reused once it is gone, so neither the
    PID nor the namespace names a sandboxed timer alone."""
    pid = os.getpid()
    if _holder.get("pid") != pid:  # first call, or a forked child
        _holder.update(pid=pid, token=secrets.token_hex(4))
    return f"{pid}-{_holder['token']}"


_holder: dict = {}


@contextmanager
def file_lock(path: Path, wait: bool = True):
    """Held for the block. With `wait` False it yields False at once where another holds it
    (the block then runs without the lock, and should do nothing that needs it), True otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
