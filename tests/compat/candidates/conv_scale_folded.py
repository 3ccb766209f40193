"""Folds the multiplier and the offset into the convolution's weight and bias once."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier, offset):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.register_buffer("weight", conv.weight.detach() * multiplier)
        self.register_buffer("bias", conv.bias.detach() * multiplier + offset)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias)
