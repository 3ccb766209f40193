"""Honest: gpu_clock_events_slowed's slow ReLU over 16 MiB (a few milliseconds a call) without its
patch: its timed request is all its calls and the loop around them. GPU only."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

REPEAT = 4000


@triton.jit
def slow_relu_kernel(x_ptr, out_ptr, n, REPEAT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    magnitude = tl.abs(x)
    for _ in range(REPEAT):
        magnitude = tl.sqrt(magnitude * magnitude)  # |x| again, the long way
    tl.store(out_ptr + offsets, (x + magnitude) * 0.5, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        slow_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), REPEAT=REPEAT, BLOCK=1024)
        return out
