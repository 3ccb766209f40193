"""The worker's own clock, the GPU's form: at import, finds the worker's timer.Clock through gc and
replaces its event-timing function with one that reports 20 times less. Each call's host clock
readings stay true, so the time between them that the events leave out grows by what was hidden:
timing_unaccounted. A ReLU over 16 MiB (relu_16mb.py) done the slow way, a few milliseconds a call,
so that what is hidden is far above what the loop may cost around a call. GPU only."""

import gc

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


for found in gc.get_objects():
    if type(found).__name__ == "Clock" and hasattr(found, "_elapsed"):
        found._elapsed = lambda start, end, real=found._elapsed: real(start, end) / 20


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        slow_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), REPEAT=REPEAT, BLOCK=1024)
        return out
