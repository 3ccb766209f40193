"""gemm_scale_bn in the glue style: cuBLAS GEMM through F.linear, the bias add and the scale fused
into one own Triton kernel, BatchNorm left to PyTorch."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def bias_scale_kernel(y_ptr, bias_ptr, scale_ptr, out_ptr, n, features, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    column = offsets % features
    y = tl.load(y_ptr + offsets, mask=mask)
    value = (y + tl.load(bias_ptr + column, mask=mask)) * tl.load(scale_ptr + column, mask=mask)
    tl.store(out_ptr + offsets, value, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.gemm.weight)
        out = torch.empty_like(y)
        n = y.numel()
        bias_scale_kernel[(triton.cdiv(n, 1024),)](y, self.gemm.bias, self.scale, out, n, y.shape[1], BLOCK=1024)
        return self.bn(out)
