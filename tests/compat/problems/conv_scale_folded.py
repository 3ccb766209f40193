"""Convolution, multiplied by a constant, plus a constant (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 2
in_channels = 4
out_channels = 8
height = width = 10
kernel_size = 3
multiplier = 2.0
offset = 0.25


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier, offset):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.multiplier = multiplier
        self.offset = offset

    def forward(self, x):
        return self.conv(x) * self.multiplier + self.offset


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, multiplier, offset]
