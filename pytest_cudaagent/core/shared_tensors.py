"""Host copies made straight into shared memory, for tensors that travel between processes.

torch.multiprocessing sends a CPU tensor by moving its storage into shared memory first: a second
copy of every byte, into pages faulted in one by one. A copy made there in the first place travels
as a file descriptor. On the H100 machine a level-1 problem's 64 MiB tensors crossed three
processes that way nine times per evaluation (#21: 3.4 s of its 5.1 s of correctness).
"""

from __future__ import annotations

import math

import torch

from .bus_copies import copy_across
from .tensor_trees import map_tensors, tensors


def shared_empty(shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor whose storage is shared memory (empty ones travel
    without any, as torch sends them)."""
    numel = math.prod(shape)
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(numel * dtype.itemsize)
    if storage.nbytes() >= POPULATE_FROM_BYTES:
        populate(storage)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


# A fresh shared-memory storage this large has its pages faulted in by several threads at once
# before anyone writes into it: the kernel faults a fresh page in (allocates and zeroes it) on
# first touch, one page at a time, and a copy into 6 GiB of fresh shared memory ran at 1.4 GB/s
# on the H200 host against 16 GB/s into pages in place (experiments/bus_copies.py, #38).
POPULATE_FROM_BYTES = 256 << 20
POPULATE_THREADS = 8
_PAGE = 4096


def populate(storage: torch.UntypedStorage) -> None:
    """Touch one byte of every page of `storage` (written as zero: its contents are undefined
    until written anyway), by up to POPULATE_THREADS threads, each its own contiguous part (NumPy's
    strided store lets the GIL go)."""
    from ..system.cores import cut, in_threads, usable_cores

    pages = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
    threads = max(1, min(POPULATE_THREADS, usable_cores(), -(-len(pages) // _PAGE)))
    bounds = cut(len(pages), threads, _PAGE)

    def touch(part: int) -> None:
        pages[bounds[part]:bounds[part + 1]:_PAGE] = 0

    in_threads(touch, threads, "cudaagent-populate")


def shared_copy(value: object) -> object:
    """A contiguous host copy of a tensor (on any device) in shared memory, and of every tensor
    nested in a list, tuple or dict (tensor_trees.py: torch would otherwise move a nested one's
    own storage into shared memory to send it, and sender and receiver would share it); anything
    else as is. The copy from a device waits for it, as `.to("cpu")` does."""
    return map_tensors(_shared_tensor_copy, value)


def _shared_tensor_copy(value: torch.Tensor) -> torch.Tensor:
    if type(value) is not torch.Tensor:
        return value
    copy = shared_empty(value.shape, value.dtype)
    copy_across(copy, value.detach())  # from a device: its pages locked for the one copy
    return copy


def shared_copies(values: list) -> list:
    return [shared_copy(value) for value in values]


class SharedBufferPool:
    """Shared-memory tensors lent to a worker for one request and given back after it, so each is
    faulted in once: a 64 MiB copy into pages already in place took 2.8 ms on the dev box, into a
    fresh segment 37 ms. Whoever lends decides when a buffer is free again; the worker only ever
    writes into what it was lent for the request at hand."""

    def __init__(self) -> None:
        self._free: dict[tuple, list[torch.Tensor]] = {}
        self.fresh = 0  # buffers made because none of the shape and dtype was free
        self.reused = 0  # buffers taken from those given back

    @staticmethod
    def _key(tensor: torch.Tensor) -> tuple:
        return tuple(tensor.shape), tensor.dtype

    def take(self, like: torch.Tensor) -> torch.Tensor:
        """A contiguous shared tensor of `like`'s shape and dtype, its contents whatever they were."""
        free = self._free.get(self._key(like))
        if free:
            self.reused += 1
            return free.pop()
        self.fresh += 1
        return shared_empty(like.shape, like.dtype)

    def copy_of(self, value: object) -> object:
        """`value` copied into lent buffers (a tensor, or each tensor nested in it), or as is."""
        return map_tensors(self._tensor_copy, value)

    def _tensor_copy(self, value: torch.Tensor) -> torch.Tensor:
        if type(value) is not torch.Tensor:
            return value
        buffer = self.take(value)
        copy_across(buffer, value.detach())  # from a device: its pages locked for the one copy
        return buffer

    def give_back(self, values: list) -> None:
        for value in tensors(values):
            if type(value) is torch.Tensor and value.is_shared():
                self._free.setdefault(self._key(value), []).append(value)
