"""Per-channel scale kept as a buffer, multiplied by a constant in forward, then sigmoid."""

import torch
import torch.nn as nn

batch_size = 8
channels = 16
length = 20
factor = 3.0


class Model(nn.Module):
    def __init__(self, channels, factor):
        super().__init__()
        self.register_buffer("scale", torch.rand(channels, 1))
        self.factor = factor

    def forward(self, x):
        return torch.sigmoid(x * self.scale * self.factor)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, factor]
