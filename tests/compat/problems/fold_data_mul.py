"""Matrix multiply (Gemm), scaled, then a residual add of the scaled result (KernelBench level-2
style)."""

import torch
import torch.nn as nn

batch_size = 32
in_features = 64
out_features = 48
scaling_factor = 0.7


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.gemm(x)
        original = x.clone().detach()
        x = x * self.scaling_factor
        return x + original


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
