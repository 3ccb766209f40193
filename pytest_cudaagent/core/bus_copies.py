"""Copies across the host-device bus of large host tensors, with the host side page-locked.

The sets a reference draws, the inputs lent to a candidate and the outputs it sends back live in
host shared memory (shared_tensors.py): pageable memory, which CUDA copies through a small staging
buffer, a chunk at a time, faulting fresh pages in one by one. At KernelBench's full sizes (level
1: 6.4 GB inputs and outputs, ten of each per pair) those copies were most of a pair's minutes
(#38, four H200s: a reference's prepare 60-100 s, its CPU 107 s). Registering the host range with
the driver (cudaHostRegister) for the one copy faults it in at once and lets the copy run as one
DMA; the range is unregistered right after, so nothing stays locked.

Where registration is refused (no CUDA, a mapping the driver will not lock), the copy is made as
before: the same bytes either way.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

import torch

# Host tensors smaller than this are copied as they are: registering costs a system call and a
# walk of the pages, more than a small copy saves.
PIN_FROM_BYTES = 64 << 20
_PAGE = 4096


def copy_across(destination: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """`destination.copy_(source)`, with the host side registered while it runs when exactly one
    of the two is on a CUDA device and the host one is large, contiguous and not pinned already."""
    host = _host_side(destination, source)
    if host is None:
        return destination.copy_(source)
    with registered(host):
        return destination.copy_(source)


def to_device(tensor: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """`tensor.to(device)`, the host tensor registered for the copy when it is large."""
    if tensor.device.type != "cpu" or torch.device(device).type != "cuda" or not _worth_registering(tensor):
        return tensor.to(device)
    with registered(tensor):
        return tensor.to(device)


def _host_side(destination: torch.Tensor, source: torch.Tensor) -> torch.Tensor | None:
    kinds = (destination.device.type, source.device.type)
    if kinds == ("cpu", "cuda"):
        host = destination
    elif kinds == ("cuda", "cpu"):
        host = source
    else:
        return None
    return host if _worth_registering(host) else None


def _worth_registering(host: torch.Tensor) -> bool:
    return (type(host) is torch.Tensor and host.layout == torch.strided and host.is_contiguous()
            and host.numel() * host.element_size() >= PIN_FROM_BYTES and not host.is_pinned())


@contextlib.contextmanager
def registered(host: torch.Tensor) -> Iterator[bool]:
    """The host tensor's pages locked for the copies made inside (True), or left as they are
    where the driver refuses (False). The range is widened to whole pages: a shared-memory
    storage starts on a page and its mapping ends on one."""
    start = host.data_ptr() // _PAGE * _PAGE
    end = -(-(host.data_ptr() + host.numel() * host.element_size()) // _PAGE) * _PAGE
    try:
        cudart = torch.cuda.cudart()
        status = cudart.cudaHostRegister(start, end - start, 0)
    except Exception:  # noqa: BLE001 - no CUDA runtime here: the copy is made as it is
        yield False
        return
    if int(status) != 0:
        # A refusal leaves its error as the runtime's last one: cleared, so that no later
        # unrelated check reads it as its own.
        _clear_last_error()
        yield False
        return
    try:
        yield True
    finally:
        cudart.cudaHostUnregister(start)


def _clear_last_error() -> None:
    """cudaGetLastError of the process's CUDA runtime (torch binds no such call): a refused
    registration is recorded as the last error, and the next kernel launch check would raise it."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    except OSError:
        paths = set()
    for path in paths:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(path).cudaGetLastError()
            return
    # No runtime library found by name (linked statically): a launch check reads and clears it.
    with contextlib.suppress(RuntimeError):
        torch.zeros(1, device="cuda").add_(1)
