"""Linear layer, then a constant scale and a residual add of the input (KernelBench level-2
style)."""

import torch
import torch.nn as nn

batch_size = 16
features = 32
scale = 1.5


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.scale = scale

    def forward(self, x):
        return self.linear(x) * self.scale + x


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, scale]
