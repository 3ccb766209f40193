"""Matrix multiply with a linear layer, then GELU (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 64
in_features = 256
out_features = 128


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
