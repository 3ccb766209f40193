"""Convolution, minus a constant, then tanh (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 4
in_channels = 3
out_channels = 16
height = width = 10
kernel_size = 3
subtract_value = 0.5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract_value):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract_value = subtract_value

    def forward(self, x):
        x = self.conv(x)
        x = x - self.subtract_value
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, subtract_value]
