"""shared_tensors.py and the copies outputs.py keeps: what crosses between the workers is made in
shared memory once, lent buffers are reused, and only a changed input travels back."""

import pytest
import torch

from pytest_cudaagent.core.shared_tensors import SharedBufferPool, shared_copy, shared_empty
from pytest_cudaagent.rules import outputs
from pytest_cudaagent.rules.outputs import (
    device_snapshot,
    held_copies,
    inspect_outputs,
    storage_changes,
    unchanged,
)


def test_a_shared_copy_is_contiguous_shared_and_equal():
    source = torch.randn(6, 4).t()[1:]  # not contiguous, offset
    copy = shared_copy(source)
    assert copy.is_shared() and copy.is_contiguous() and torch.equal(copy, source)
    assert shared_copy(3.5) == 3.5
    assert shared_empty((0, 3), torch.float32).shape == (0, 3)


def _resident_pages(tensor: torch.Tensor) -> int:
    """How many of the tensor's pages are in memory (mincore(2) over its span)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    start = tensor.data_ptr()
    nbytes = tensor.numel() * tensor.element_size()
    pages = -(-nbytes // 4096)
    vector = ctypes.create_string_buffer(pages)
    assert libc.mincore(start, nbytes, vector) == 0, ctypes.get_errno()
    return sum(byte & 1 for byte in vector.raw)


def test_a_large_fresh_shared_storage_has_its_pages_faulted_in_by_several_threads(monkeypatch):
    """Fresh shared memory is faulted in a page at a time on first touch (1.4 GB/s into it against
    16 GB/s into pages in place, #38 on the H200 host): a storage from POPULATE_FROM_BYTES up
    comes with every page in memory, touched by parts in threads; a smaller one does not."""
    from pytest_cudaagent.core import shared_tensors

    monkeypatch.setattr(shared_tensors, "POPULATE_FROM_BYTES", 4 << 20)
    monkeypatch.setattr("pytest_cudaagent.system.cores.usable_cores", lambda: 4)
    threads = set()
    original = torch.Tensor.numpy

    class Recording:
        def __init__(self, array):
            self.array = array

        def __setitem__(self, key, value):
            threads.add(__import__("threading").current_thread().name)
            self.array[key] = value

        def __len__(self):
            return len(self.array)

    monkeypatch.setattr(torch.Tensor, "numpy", lambda self, *a, **k: Recording(original(self, *a, **k)))
    large = shared_empty((5 << 20,), torch.float32)  # 20 MiB: 5120 pages
    monkeypatch.setattr(torch.Tensor, "numpy", original)
    assert _resident_pages(large) == 5120
    assert len(threads) == 4 and all(name.startswith("cudaagent-populate") for name in threads)
    small = shared_empty((256 << 10,), torch.float32)  # 1 MiB: under the floor, left to first touch
    assert _resident_pages(small) <= 1  # of 256 (the allocator may write its first page)
    large.fill_(2.0)
    assert bool((large == 2.0).all())


def test_lent_buffers_are_reused_once_given_back():
    pool = SharedBufferPool()
    first = pool.copy_of(torch.ones(4, 4))
    assert first.is_shared() and torch.equal(first, torch.ones(4, 4))
    pool.give_back([first, None, torch.zeros(4, 4)])  # a tensor not in shared memory is not kept
    second = pool.copy_of(torch.full((4, 4), 2.0))
    assert second.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    assert torch.equal(second, torch.full((4, 4), 2.0))
    other = pool.take(torch.ones(4, 4))  # none free of that shape: a new one
    assert other.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    assert pool.take(torch.ones(4, 4, dtype=torch.float64)).dtype == torch.float64
    # What Result.env["sets_recycled"] is counted from: buffers reused, and made afresh.
    assert (pool.reused, pool.fresh) == (1, 3)


def test_outputs_go_into_the_lent_storage_when_they_fit_else_a_fresh_copy():
    lent = [shared_empty((3,), torch.float32), shared_empty((3,), torch.float32)]
    returned = (torch.arange(3.0), torch.arange(4.0))
    report = inspect_outputs(returned, [], "cpu", into=[buffer.untyped_storage() for buffer in lent])
    first, second = report["outputs"]
    assert first.untyped_storage().data_ptr() == lent[0].untyped_storage().data_ptr()
    assert torch.equal(lent[0], torch.arange(3.0))
    assert second.untyped_storage().data_ptr() != lent[1].untyped_storage().data_ptr() and second.is_shared()
    assert torch.equal(second, torch.arange(4.0))


def test_an_input_counts_as_unchanged_only_with_the_same_metadata_and_bytes():
    x, y = torch.randn(4, 4), torch.randn(3)
    before = device_snapshot([x, y, 7])
    assert unchanged(before[0], x) and unchanged(before[1], y) and not unchanged(before[2], 7)
    x[1, 2] += 1
    y.resize_(1, 3)
    assert not unchanged(before[0], x) and not unchanged(before[1], y)
    nan = torch.full((2,), float("nan"))
    assert unchanged(device_snapshot([nan])[0], nan)  # NaN meets the same NaN


def test_over_the_snapshot_budget_every_input_travels_back(monkeypatch):
    monkeypatch.setattr(outputs, "SNAPSHOT_BUDGET_BYTES", 8)
    x = torch.zeros(4)
    assert device_snapshot([x]) == [None] and not unchanged(None, x)


def test_held_copies_on_the_cpu_are_private_not_the_lent_buffer():
    output = torch.arange(5.0)
    kept = held_copies([output, "text"], {})
    assert kept[1] is None and torch.equal(kept[0], output)
    assert kept[0].untyped_storage().data_ptr() != output.untyped_storage().data_ptr()


@pytest.mark.gpu
def test_on_the_gpu_snapshots_and_held_copies_stay_on_the_device_within_their_budget(monkeypatch):
    x = torch.randn(256, 256, device="cuda")
    before = device_snapshot([x])
    assert before[0][1][0][0].device == x.device and unchanged(before[0], x)
    x[0, 0] = float("nan")
    assert not unchanged(before[0], x)
    state: dict = {}
    kept = held_copies([x, x], state)
    assert [copy.device.type for copy in kept] == ["cuda", "cuda"] and state["held_on_device_bytes"] == 2 * x.nbytes
    monkeypatch.setattr(outputs, "HELD_ON_DEVICE_BUDGET_BYTES", 3 * x.nbytes - 1)
    kept = held_copies([x], state)  # a third would pass the budget: a digest, taken on the device
    assert isinstance(kept[0], outputs.HeldDigest) and kept[0].matches(x)
    assert not storage_changes([x], kept)
    x[1, 1] += 1
    assert storage_changes([x], kept)[0].rule == "output_reused"


def test_with_one_populate_thread_no_thread_is_started(monkeypatch):
    """The candidate's worker faults its shared memory in on its serving thread: a thread the
    harness started after the candidate's code was loaded would be held to be the candidate's."""
    import threading

    from pytest_cudaagent.core import shared_tensors

    monkeypatch.setattr(shared_tensors, "POPULATE_FROM_BYTES", 1 << 20)
    monkeypatch.setattr(shared_tensors, "POPULATE_THREADS", 1)
    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self.name))
    large = shared_empty((1 << 20,), torch.float32)  # 4 MiB
    assert _resident_pages(large) == 1024 and started == []


def test_the_candidates_worker_starts_no_populate_or_compare_threads(monkeypatch):
    from pytest_cudaagent.core import compare, shared_tensors
    from pytest_cudaagent.workers import worker

    monkeypatch.setattr(shared_tensors, "POPULATE_THREADS", 8)
    monkeypatch.setattr(compare, "COMPARE_THREADS", 8)

    class Stop(Exception):
        pass

    def server(conn, spec):
        raise Stop

    monkeypatch.setattr(worker, "CandidateServer", server)
    with pytest.raises(Stop):
        worker.serve_candidate(None, {}, {})
    assert shared_tensors.POPULATE_THREADS == 1 and compare.COMPARE_THREADS == 1
