"""Output memory read as it is (output_memory.py): a CPU output is copied through the kernel, so
memory mapped without access is an error there, and no fault handler of the candidate runs."""

import ctypes
import mmap

import pytest
import torch

from pytest_cudaagent.rules import output_memory
from pytest_cudaagent.rules.outputs import inspect_outputs

PAGE = mmap.PAGESIZE
PROT_NONE = 0  # mmap.PROT_NONE exists from Python 3.13


def unreadable(pages: int, readable_pages: int = 0) -> torch.Tensor:
    """A float tensor over fresh anonymous memory, all but its first pages mapped without access.
    Read from user space, it would kill this process with SIGSEGV."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = libc.mmap(None, pages * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    ctypes.memset(base, 0, readable_pages * PAGE)
    assert libc.mprotect(base + readable_pages * PAGE, (pages - readable_pages) * PAGE, PROT_NONE) == 0
    memory = (ctypes.c_float * (pages * PAGE // 4)).from_address(base)
    return torch.frombuffer(memory, dtype=torch.float32)


def test_a_readable_output_is_copied_exactly_contiguous_or_not():
    source = torch.randn(64, 48)
    for view in (source, source.t(), source[:, 5:17], source[::3]):
        copy = output_memory.copy_into(torch.empty(view.shape), view)
        assert torch.equal(copy, view)
    assert output_memory.copy_into(torch.empty(0), torch.empty(0)).numel() == 0


def test_memory_mapped_without_access_is_an_error_not_a_fault():
    with pytest.raises(output_memory.UnreadableOutput, match="cannot be read"):
        output_memory.copy_into(torch.empty(4 * PAGE // 4), unreadable(4))
    with pytest.raises(output_memory.UnreadableOutput, match=f"at offset {PAGE}"):
        output_memory.copy_into(torch.empty(4 * PAGE // 4), unreadable(4, readable_pages=1))


def test_an_unreadable_output_is_a_lazy_output_violation_wherever_it_is_copied():
    lazy = unreadable(2)
    report = inspect_outputs(lazy, [], "cpu")
    assert report["outputs"] == [None] and [v.rule for v in report["violations"]] == ["lazy_output"]
    lent = torch.empty(lazy.shape).untyped_storage()
    report = inspect_outputs([torch.ones(3), lazy], [], "cpu", into=[None, lent])
    assert report["outputs"][1] is None and [v.rule for v in report["violations"]] == ["lazy_output"]
    assert torch.equal(report["outputs"][0], torch.ones(3))


def test_device_memory_kind_asks_nothing_of_cpu_tensors():
    assert output_memory.device_memory_kind(torch.ones(3)) is None


@pytest.mark.gpu
def test_on_the_gpu_only_the_devices_own_memory_is_an_output():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    assert output_memory.device_memory_kind(torch.ones(1024, device="cuda")) is None
    pinned = torch.ones(1024).pin_memory()
    libcuda = ctypes.CDLL("libcuda.so.1")
    device_pointer = ctypes.c_uint64()
    assert libcuda.cuMemHostGetDevicePointer_v2(ctypes.byref(device_pointer), ctypes.c_void_p(pinned.data_ptr()), 0) == 0

    class Mapped:
        __cuda_array_interface__ = {"shape": (1024,), "typestr": "<f4", "data": (device_pointer.value, False),
                                    "version": 3, "strides": None}

    mapped = torch.as_tensor(Mapped(), device="cuda")
    assert output_memory.device_memory_kind(mapped) == "host memory mapped into the device"
