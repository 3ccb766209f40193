"""Output memory read as it is, never as the candidate would compute it on first read.

An output can be a plain `torch.Tensor` over memory the candidate mapped without access: a
SIGSEGV handler computes each page the first time something reads it, which was the worker's own
copy of the output right after the clock stopped (passed at 87x; computing an eighth inside
`forward` and the rest on read, 8x with no flag). Every host copy of a CPU output that goes to the
evaluator is therefore made through the kernel (`process_vm_readv` on this very process): the
kernel reads a page it may not read as an error, no handler runs, and the output is a
`lazy_output` violation. Nothing is added to the timed region, so every speedup stays as it was.

On the GPU the copies are made by the device, which never runs a host handler; what could still
hold values that come later is memory that is not the device's: host memory mapped into the
device's address space or managed memory, whose pages a host thread can fill after `forward`
returned. An output there is `lazy_output` too (`device_memory_kind`).
"""

from __future__ import annotations

import ctypes
import os

import torch

from ..core.bus_copies import copy_across

RULE = "lazy_output"


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _process_vm_readv():
    try:
        function = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):  # not Linux (or a C library without it): plain copies
        return None
    function.restype = ctypes.c_ssize_t
    function.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
                         ctypes.c_ulong, ctypes.c_ulong]
    return function


_READV = _process_vm_readv()


class UnreadableOutput(Exception):
    """Part of an output's memory is not readable: it is mapped without access (or not mapped)."""


def _read_bytes(address: int, destination: int, nbytes: int) -> None:
    """`nbytes` from `address` to `destination`, both in this process, through the kernel."""
    pid = os.getpid()
    done = 0
    while done < nbytes:
        local = _IoVec(destination + done, nbytes - done)
        remote = _IoVec(address + done, nbytes - done)
        count = _READV(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if count <= 0:
            raise UnreadableOutput(f"{nbytes - done} of {nbytes} bytes at offset {done} cannot be read "
                                   f"({os.strerror(ctypes.get_errno()) if count < 0 else 'no progress'})")
        done += count


def _span_bytes(tensor: torch.Tensor) -> tuple[int, int]:
    """(first byte, byte count) of the storage that `tensor`'s elements cover."""
    if tensor.numel() == 0:
        return tensor.data_ptr(), 0
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
    return tensor.data_ptr(), (last + 1) * tensor.element_size()


def copy_into(destination: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """`source`'s values into `destination` (contiguous, same shape and dtype), like
    `destination.copy_(source)`, but for a CPU source read through the kernel: UnreadableOutput
    where any of its memory cannot be read, and no fault handler of the candidate ever runs."""
    source = source.detach()
    if source.device.type != "cpu" or _READV is None or source.layout != torch.strided:
        return copy_across(destination, source)
    address, nbytes = _span_bytes(source)
    if not nbytes:
        return destination
    if source.is_contiguous() and destination.is_contiguous() and not (source.is_conj() or source.is_neg()):
        _read_bytes(address, destination.data_ptr(), nbytes)
        return destination
    staging = torch.empty(nbytes, dtype=torch.uint8)
    _read_bytes(address, staging.data_ptr(), nbytes)
    view = staging.view(source.dtype).as_strided(source.shape, source.stride())
    if source.is_conj():
        view = view.conj()
    if source.is_neg():
        view = view._neg_view()
    return destination.copy_(view)


# cuda.h: CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_MEMORYTYPE_DEVICE.
_MEMORY_TYPE, _IS_MANAGED, _DEVICE_MEMORY = 2, 8, 2
_CUDA_ERROR_INVALID_VALUE = 1


def _pointer_attribute():
    try:
        function = ctypes.CDLL("libcuda.so.1").cuPointerGetAttribute
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    return function


_POINTER_ATTRIBUTE = None


def device_memory_kind(tensor: torch.Tensor) -> str | None:
    """None where a CUDA tensor's memory is the device's own; else what it is ("host memory
    mapped into the device", "managed memory", "no CUDA allocation"). None too where the driver
    cannot be asked (no verdict without an answer)."""
    global _POINTER_ATTRIBUTE
    if tensor.device.type != "cuda" or tensor.numel() == 0:
        return None
    if _POINTER_ATTRIBUTE is None:
        _POINTER_ATTRIBUTE = _pointer_attribute()
        if _POINTER_ATTRIBUTE is None:
            return None
    managed, memory_type = ctypes.c_uint(0), ctypes.c_uint(0)
    code = _POINTER_ATTRIBUTE(ctypes.byref(managed), _IS_MANAGED, tensor.data_ptr())
    if code == _CUDA_ERROR_INVALID_VALUE:
        return "no CUDA allocation"
    if code == 0 and managed.value:
        return "managed memory"
    code = _POINTER_ATTRIBUTE(ctypes.byref(memory_type), _MEMORY_TYPE, tensor.data_ptr())
    if code == 0 and memory_type.value != _DEVICE_MEMORY:
        return "host memory mapped into the device"
    return None
