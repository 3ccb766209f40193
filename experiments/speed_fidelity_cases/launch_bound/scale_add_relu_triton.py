"""scale_add_relu fused into one own Triton kernel: one launch where eager makes four."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_relu_kernel(x_ptr, y_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask) * alpha + tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(value, 0.0) * beta, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_relu_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, self.alpha, self.beta, BLOCK=1024)
        return out
