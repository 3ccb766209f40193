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

import pytest

from pytest_cudaagent import memory_gate
from pytest_cudaagent.footprints import Footprint
from pytest_cudaagent.memory_gate import Gate, Reservation, shared_memory_held, still_to_take

MIB = 1024**2
GIB = 1024**3
WAIT_S = 60


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

        def admit() -> None:
            with gate.shared("admit", "small") as hold:
                hold.admit(Footprint(0, 4 * GIB))
                outcome.append(hold.admitted)

        thread = threading.Thread(target=admit)
        thread.start()
        thread.join(WAIT_S)
    assert outcome and outcome[0].startswith(admitted), outcome
