"""A reference that disagrees with itself: each call scales by how often it has been called."""

import torch
import torch.nn as nn

batch_size = 8
dim = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
