"""Swish activation followed by a scale."""

import torch
import torch.nn as nn

batch_size = 16
dim = 256
scale = 1.5


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * torch.sigmoid(x) * self.scale


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]
