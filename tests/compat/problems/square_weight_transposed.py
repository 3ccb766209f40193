"""Square linear layer, then GELU (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 16
features = 32


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
