"""Lazy pages, the GPU's form: the output is page-locked host memory mapped into the device's
address space, which a host thread can write after forward returned (the device reads it over the
bus when the copy runs). Here a Triton kernel writes it (the values are right): what is refused is
memory that is not the device's own (lazy_output). GPU only."""

import ctypes

import torch
import torch.nn as nn
import triton
import triton.language as tl

DRIVER = ctypes.CDLL("libcuda.so.1")


@triton.jit
def leaky_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, x * slope), mask=mask)


class Mapped:
    """Pinned host memory, seen by torch as a CUDA array through its device pointer."""

    def __init__(self, shape):
        self.host = torch.empty(shape, dtype=torch.float32, pin_memory=True)
        pointer = ctypes.c_uint64()
        assert DRIVER.cuMemHostGetDevicePointer_v2(ctypes.byref(pointer), ctypes.c_void_p(self.host.data_ptr()), 0) == 0
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<f4", "data": (pointer.value, False),
                                         "version": 3, "strides": None}


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        out = torch.as_tensor(Mapped(x.shape), device=x.device)
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.slope, BLOCK=1024)
        return out
