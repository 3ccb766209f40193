"""Linear layer followed by a constant scale and a ReLU (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 24
scaling_factor = 0.5


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return torch.relu(self.linear(x) * self.scaling_factor)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
