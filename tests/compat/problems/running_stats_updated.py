"""Linear layer, BatchNorm1d, then ReLU (KernelBench level-2 style; training mode)."""

import torch
import torch.nn as nn

batch_size = 32
in_features = 16
out_features = 12


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return torch.relu(self.bn(self.linear(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features) * 2.0 + 1.0]


def get_init_inputs():
    return [in_features, out_features]
