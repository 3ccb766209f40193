"""Honest: writes every call's answer into one persistent output buffer (as `out=` solutions and
CUDA-graph static outputs do) with its own Triton kernel. Each call's values are right; a caller
holding an earlier result sees it overwritten."""

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


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape or self.out.device != x.device:
            self.out = torch.empty_like(x)
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.out, x.numel(), self.slope, BLOCK=1024)
        return self.out
