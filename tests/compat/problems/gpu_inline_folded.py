"""Linear layer divided by a constant, then ReLU (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 512
in_features = 1024
out_features = 1024
divisor = 2.0


class Model(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.divisor = divisor

    def forward(self, x):
        return torch.relu(self.linear(x) / self.divisor)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, divisor]
