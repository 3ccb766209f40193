"""Correctness: computes in place into its input and returns a view of it (`x[:]`), so the
output shares the input's storage under another tensor object."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, x * slope), mask=mask)


def leaky(x, slope):
    out = torch.empty_like(x)
    leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), slope, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, x, x.numel(), self.slope, BLOCK=1024)
        return x[:]
