"""Linear layer, hardtanh, then a scale (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 48
min_val = -0.5
max_val = 0.5
scale = 3.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, min_val, max_val, scale):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.min_val = min_val
        self.max_val = max_val
        self.scale = scale

    def forward(self, x):
        x = self.gemm(x)
        x = torch.nn.functional.hardtanh(x, self.min_val, self.max_val)
        return x * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, min_val, max_val, scale]
