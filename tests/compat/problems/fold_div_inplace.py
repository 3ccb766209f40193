"""Convolution divided by a constant, then a LeakyReLU (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 4
in_channels = 3
out_channels = 8
height = width = 12
kernel_size = 3
divisor = 2.5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, divisor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.divisor = divisor

    def forward(self, x):
        x = self.conv(x)
        x = x / self.divisor
        return torch.nn.functional.leaky_relu(x, negative_slope=0.01)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, divisor]
