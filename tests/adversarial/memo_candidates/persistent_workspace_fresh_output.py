"""Honest: a persistent workspace kept between calls (as solutions that precompute or cache a
scratch buffer do), every result in fresh storage. Nothing handed out is ever written again."""

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
        self.workspace = None

    def forward(self, x):
        if self.workspace is None or self.workspace.shape != x.shape or self.workspace.device != x.device:
            self.workspace = torch.empty_like(x)
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.workspace, x.numel(), self.slope, BLOCK=1024)
        return self.workspace.clone()
