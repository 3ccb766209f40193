"""Linear layer, then a learnable scalar scale and hardtanh (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 24


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.tensor(1.75))

    def forward(self, x):
        return torch.nn.functional.hardtanh(self.linear(x) * self.scale, -1.0, 1.0)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
