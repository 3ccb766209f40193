"""Instance normalisation written out: each sample's channel normalised over its own pixels."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.eps = 1e-5

    def forward(self, x):
        y = self.conv(x)
        mean = y.mean(dim=(2, 3), keepdim=True)
        var = y.var(dim=(2, 3), keepdim=True, unbiased=False)
        return (y - mean) * torch.rsqrt(var + self.eps)
