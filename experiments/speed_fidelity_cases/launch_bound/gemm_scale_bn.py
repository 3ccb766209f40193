"""Problem: GEMM, per-feature scale and BatchNorm at KernelBench v0.1's level-2 sizes (batch 128,
1024 -> 512, train mode as constructed): about 40 us of kernels behind several launches."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.gemm(x) * self.scale)


def get_inputs():
    return [torch.randn(128, 1024)]


def get_init_inputs():
    return [1024, 512, (512,)]
