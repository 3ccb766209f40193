"""Transposed convolution, then a bias and tanh (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 2
in_channels = 4
out_channels = 6
height = width = 8
kernel_size = 3
bias_shape = (out_channels, 1, 1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        return torch.tanh(self.conv_transpose(x) - self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
