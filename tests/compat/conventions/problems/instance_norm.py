"""Convolution followed by InstanceNorm2d (no running statistics: the same in either mode)."""

import torch
import torch.nn as nn

batch_size = 4
in_channels = 3
out_channels = 6
height = width = 10
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.InstanceNorm2d(out_channels)

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
