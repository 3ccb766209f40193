"""Admission by footprint counts only what pending pairs have not taken yet (#38).

What a running pair's processes hold is out of the free memory already; counting it again as
reserved made every pair of the 250-pair identity set wait 120-260 s on the H100 for room that was
there. These tests pin the accounting: memory a pair's process maps really (a child holding shared
memory, as a reference holds its sets), NVML's per-process device memory, and the admission that
follows from both.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import pytest

from pytest_cudaagent.resources import memory_gate
from pytest_cudaagent.resources.footprints import Footprint
from pytest_cudaagent.resources.memory_gate import (
    Gate,
    Reservation,
    shared_memory_held,
    still_to_take,
)
from tests.helpers import admitting

MIB = 1024**2
GIB = 1024**3
WAIT_S = 60

@pytest.fixture(autouse=True)
def no_host_headroom(monkeypatch):
    """These tests give the free memory themselves: no share of this machine's memory kept free
    beyond the footprints (test_admission_taken.py's own test of HOST_HEADROOM_SHARE sets it)."""
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.HOST_HEADROOM_SHARE", 0.0)



def _hold_shared_memory(nbytes: int, ready, done) -> None:
    """A child that maps and touches `nbytes` of shared memory, as a reference holds its sets."""
    import torch

    storage = torch.UntypedStorage._new_shared(nbytes)
    torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,)).fill_(1)
    ready.set()
    done.wait(WAIT_S)


@pytest.fixture()
def holder():
    """A process holding 256 MiB of shared memory, until the test ends."""
    context = multiprocessing.get_context("spawn")
    ready, done = context.Event(), context.Event()
    process = context.Process(target=_hold_shared_memory, args=(256 * MIB, ready, done))
    process.start()
    assert ready.wait(WAIT_S), "the child did not map its shared memory"
    yield process
    done.set()
    process.join(WAIT_S)


def test_shared_memory_a_process_maps_is_read_from_its_smaps(holder):
    held = shared_memory_held(holder.pid)
    assert 250 * MIB <= held <= 260 * MIB, held


def test_a_process_gone_holds_nothing():
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=int)
    process.start()
    process.join(WAIT_S)
    assert shared_memory_held(process.pid) == 0


def test_a_pending_reservation_counts_only_what_its_processes_have_not_taken(holder):
    """1 GiB reserved by a pair whose reference already maps 256 MiB: 768 MiB still to come; a
    reservation smaller than what is held: nothing; one whose processes are unknown: all of it."""
    rest = still_to_take([Reservation(host_bytes=GIB, pids=[holder.pid])], "cpu")[1]
    assert 760 * MIB <= rest <= 776 * MIB, rest / MIB
    assert still_to_take([Reservation(host_bytes=128 * MIB, pids=[holder.pid])], "cpu") == (0, 0)
    assert still_to_take([Reservation(host_bytes=GIB)], "cpu") == (0, GIB)


def test_device_memory_taken_is_nvmls_per_process_figure(monkeypatch):
    """6 GiB of an 8 GiB reservation in use by the pair's worker (NVML): 2 GiB still to come. A
    pair whose PIDs NVML does not list (another PID namespace) counts whole."""
    monkeypatch.setattr(memory_gate, "device_memory_by_process", lambda: {4242: 6 * GIB, 77: 30 * GIB})
    monkeypatch.setattr(memory_gate, "shared_memory_held", lambda pid: 0)
    pair = Reservation(device_bytes=8 * GIB, pids=[os.getpid(), 4242])
    assert still_to_take([pair], "cuda") == (2 * GIB, 0)
    unseen = Reservation(device_bytes=8 * GIB, pids=[123456])
    assert still_to_take([pair, unseen], "cuda") == (10 * GIB, 0)


@pytest.mark.parametrize("taken_gib, admitted", [(7, "by footprint"), (0, "without room")])
def test_admission_is_not_held_up_by_memory_a_pending_pair_already_took(tmp_path, monkeypatch, taken_gib, admitted):
    """10 GiB free; a running pair reserved 8 GiB and its processes hold 7 GiB of it (already out of
    the 10): a 4 GiB pair fits (10 - 1) and is admitted at once. With nothing taken it must wait
    (10 - 8 < 4), here until a short time limit."""
    monkeypatch.setattr(memory_gate, "free_memory", lambda device: (None, 10 * GIB))
    monkeypatch.setattr(memory_gate, "shared_memory_free", lambda: 64 * GIB)
    monkeypatch.setattr(memory_gate, "ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr(memory_gate, "ADMISSION_WAIT_S", 0.3)
    running_pid = 4242
    monkeypatch.setattr(memory_gate, "shared_memory_held",
                        lambda pid: taken_gib * GIB if pid == running_pid else 0)
    gate = Gate("cpu", root=tmp_path)
    with gate.shared("admit", "big") as running:
        running.note_processes([running_pid])
        running.admit(Footprint(0, 8 * GIB))
        assert gate.running(besides=None)[0].pids == [os.getpid(), running_pid]
        outcome: list[str] = []
        admitting(gate, Footprint(0, 4 * GIB), outcome).join(WAIT_S)
    assert outcome and outcome[0].startswith(admitted), outcome


def _admit_in_thread(gate: Gate, problem: str, footprint: Footprint, outcome: dict) -> threading.Thread:
    def admit() -> None:
        with gate.shared("admit", problem) as hold:
            hold.admit(footprint)
            outcome[problem] = (hold.admitted, time.monotonic())
            outcome.setdefault("release", threading.Event()).wait(WAIT_S)

    thread = threading.Thread(target=admit)
    thread.start()
    return thread


def test_a_small_pair_that_fits_passes_a_large_one_waiting_for_room(tmp_path, monkeypatch):
    """10 GiB free beside a running pair (settled): a 16 GiB pair waits for room; a 4 GiB pair
    that comes after it fits and is admitted at once, not after the large one (it waited 90-480 s
    behind a 32 GiB level-1 pair on the H200)."""
    monkeypatch.setattr(memory_gate, "free_memory", lambda device: (None, 10 * GIB))
    monkeypatch.setattr(memory_gate, "shared_memory_free", lambda: 64 * GIB)
    monkeypatch.setattr(memory_gate, "ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr(memory_gate, "ADMISSION_WAIT_S", 3.0)
    gate = Gate("cpu", root=tmp_path)
    outcome: dict = {}
    with gate.shared("admit", "running") as running:
        running.admit(Footprint(0, 1 * GIB))
        running.settle()
        large = _admit_in_thread(gate, "large", Footprint(0, 16 * GIB), outcome)
        time.sleep(0.3)  # the large one is waiting now
        small = _admit_in_thread(gate, "small", Footprint(0, 4 * GIB), outcome)
        small_started = time.monotonic()
        deadline = time.monotonic() + WAIT_S
        while "small" not in outcome and time.monotonic() < deadline:
            time.sleep(0.01)
        assert outcome.get("small", ("",))[0] == "by footprint"
        assert "large" not in outcome  # still waiting when the small one went in
        assert outcome["small"][1] - small_started < 2.0
        outcome.setdefault("release", threading.Event()).set()
        small.join(WAIT_S)
        large.join(WAIT_S)
    assert outcome["large"][0].startswith("without room")  # never fitted: its time limit


def test_a_pair_that_waited_longer_than_the_fair_wait_is_served_first(tmp_path, monkeypatch):
    """A running pair still to take 3 GiB of 10 free: an 8 GiB pair waits for room (7 < 8). Once it
    has waited longer than ADMISSION_FAIR_S its need is set aside first, so a 4 GiB pair that
    comes later and would fit (7 >= 4) waits too, here until its time limit; without the fair
    wait passed it goes in at once (the test above)."""
    monkeypatch.setattr(memory_gate, "free_memory", lambda device: (None, 10 * GIB))
    monkeypatch.setattr(memory_gate, "shared_memory_free", lambda: 64 * GIB)
    monkeypatch.setattr(memory_gate, "ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr(memory_gate, "ADMISSION_WAIT_S", 1.5)
    monkeypatch.setattr(memory_gate, "ADMISSION_FAIR_S", 0.1)
    gate = Gate("cpu", root=tmp_path)
    outcome: dict = {}
    with gate.shared("admit", "running") as running:
        running.admit(Footprint(0, 3 * GIB))
        waiting = _admit_in_thread(gate, "waiting", Footprint(0, 8 * GIB), outcome)
        time.sleep(0.4)  # past the fair wait
        later = _admit_in_thread(gate, "later", Footprint(0, 4 * GIB), outcome)
        time.sleep(0.5)
        assert "later" not in outcome  # it would fit, but the starving pair comes first
        deadline = time.monotonic() + WAIT_S
        while not {"waiting", "later"} <= outcome.keys() and time.monotonic() < deadline:
            time.sleep(0.01)
        outcome.setdefault("release", threading.Event()).set()
        for thread in (waiting, later):
            thread.join(WAIT_S)
    assert outcome["waiting"][0].startswith("without room"), outcome
    assert outcome["later"][0].startswith("without room"), outcome


def test_an_admission_after_a_wait_writes_its_reservation_once(tmp_path, monkeypatch):
    """Admitted after waiting: the reservation file is written once, admitted and no longer
    waiting together (written twice, a pair looking between the writes saw it neither waiting nor
    admitted, its need counted in neither way)."""
    monkeypatch.setattr(memory_gate, "ADMISSION_POLL_S", 0.01)
    looks = iter([None, None, "by footprint"])
    monkeypatch.setattr(Gate, "_fits", lambda self, footprint, holder, waiting_since: next(looks))
    written: list[Reservation] = []
    real_write = memory_gate._write
    monkeypatch.setattr(memory_gate, "_write", lambda path, reservation: (written.append(reservation),
                                                                           real_write(path, reservation)))
    gate = Gate("cpu", root=tmp_path)
    with gate.shared("admit", "pair") as hold:
        written.clear()
        hold.admit(Footprint(0, 2 * GIB))
        assert hold.admitted == "by footprint"
    waiting = [r for r in written if r.waiting_since and not r.admitted]
    admitted = [r for r in written if r.admitted]
    assert len(waiting) == 1  # its need, once, while it waited
    assert len(admitted) == 1 and admitted[0].waiting_since == 0.0 and admitted[0].host_bytes == 2 * GIB
    assert len(written) == 2  # nothing in between


@pytest.mark.parametrize("free_gib, admitted", [(20, "by footprint"), (14, "without room")])
def test_an_admission_leaves_a_share_of_the_host_free(tmp_path, monkeypatch, free_gib, admitted):
    """On a 100 GiB machine 10 GiB stay free beyond the footprints (HOST_HEADROOM_SHARE): a
    5 GiB pair beside a running one that reserved and holds nothing more is admitted with 20 GiB
    available, and waits with 14 (14 - 10 < 5), here until a short time limit."""
    from pytest_cudaagent.system import host_memory

    monkeypatch.setattr(host_memory, "total_bytes", lambda: 100 * GIB)
    monkeypatch.setattr(memory_gate, "HOST_HEADROOM_SHARE", 0.10)
    monkeypatch.setattr(memory_gate, "free_memory", lambda device: (None, free_gib * GIB))
    monkeypatch.setattr(memory_gate, "shared_memory_free", lambda: 64 * GIB)
    monkeypatch.setattr(memory_gate, "shared_memory_held", lambda pid: 0)
    monkeypatch.setattr(memory_gate, "ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr(memory_gate, "ADMISSION_WAIT_S", 0.3)
    gate = Gate("cpu", root=tmp_path)
    with gate.shared("admit", "running") as running:
        running.admit(Footprint(0, 0))
        outcome: list[str] = []
        admitting(gate, Footprint(0, 5 * GIB), outcome).join(WAIT_S)
    assert outcome and outcome[0].startswith(admitted), outcome
