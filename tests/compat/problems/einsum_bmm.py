"""Batched matrix multiplication."""

import torch
import torch.nn as nn

batch = 4
m = 16
k = 24
n = 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return []
