"""Linear layer, then a leaky ReLU with a constant slope (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 24
negative_slope = 0.1


class Model(nn.Module):
    def __init__(self, in_features, out_features, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(self.linear(x), self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, negative_slope]
