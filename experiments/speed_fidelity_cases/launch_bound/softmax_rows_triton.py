"""softmax_rows as one own Triton kernel per row (the tutorial's fused softmax, scale folded in)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, columns, inverse_temperature, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < columns
    values = tl.load(x_ptr + row * columns + offsets, mask=mask, other=-float("inf")) * inverse_temperature
    values = values - tl.max(values, axis=0)
    numerators = tl.exp(values)
    tl.store(out_ptr + row * columns + offsets, numerators / tl.sum(numerators, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, columns = x.shape
        softmax_kernel[(rows,)](x, out, columns, 1.0 / self.temperature, BLOCK=triton.next_power_of_2(columns))
        return out
