"""Problem: a VGG-style 3x3 convolution and ReLU (cuDNN's TF32 and benchmark mode both change its time)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(32, 128, 56, 56)]


def get_init_inputs():
    return [128, 128]
