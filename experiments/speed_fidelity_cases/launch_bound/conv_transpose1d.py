"""Problem: a small 1-D transposed convolution (16 x 32 x 128 in, 64 channels out, kernel 3): a
single cuDNN kernel of a few microseconds behind nn.Module's call."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv_transpose1d = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_transpose1d(x)


def get_inputs():
    return [torch.randn(16, 32, 128)]


def get_init_inputs():
    return [32, 64, 3]
