"""A chain of element-wise operations (many small launches in eager)."""

import torch
import torch.nn as nn

batch_size = 64
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x * 2.0 + 1.0
        x = torch.relu(x)
        x = torch.tanh(x) - 0.5
        return x * x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
