"""Calls `.contiguous()` (and a flattening view) on its parameters every call before handing
them to the functional operator, as solutions that pass raw pointers to kernels do."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        weight = self.conv_transpose.weight.contiguous()
        conv_bias = self.conv_transpose.bias.contiguous()
        bias = self.bias.contiguous().view(-1)
        y = F.conv_transpose2d(x.contiguous(), weight, conv_bias - bias)
        return torch.tanh(y)
