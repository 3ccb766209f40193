"""Lazy pages, the GPU's form: the output lives in managed memory (cuMemAllocManaged), whose pages a
host thread could fill after forward returned and the device would fetch when the copy reads
them. Here a Triton kernel fills it (the values are right): what is refused is memory that is not
the device's own, whoever writes it (lazy_output). GPU only."""

import ctypes

import torch
import torch.nn as nn
import triton
import triton.language as tl

DRIVER = ctypes.CDLL("libcuda.so.1")
CU_MEM_ATTACH_GLOBAL = 1


@triton.jit
def leaky_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, x * slope), mask=mask)


class Managed:
    """A float32 array in managed memory, seen by torch through the CUDA array interface; freed with it."""

    def __init__(self, shape):
        self.pointer = ctypes.c_uint64()
        count = 1
        for size in shape:
            count *= size
        assert DRIVER.cuMemAllocManaged(ctypes.byref(self.pointer), ctypes.c_size_t(4 * count),
                                        CU_MEM_ATTACH_GLOBAL) == 0
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<f4", "data": (self.pointer.value, False),
                                         "version": 3, "strides": None}

    def __del__(self):
        DRIVER.cuMemFree_v2(self.pointer)


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        out = torch.as_tensor(Managed(x.shape), device=x.device)
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.slope, BLOCK=1024)
        return out
