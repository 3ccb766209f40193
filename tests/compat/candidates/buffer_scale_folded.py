"""The constant folded into the buffer of the reference's name and shape, in place."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels, factor):
        super().__init__()
        self.register_buffer("scale", torch.rand(channels, 1))
        self.scale.mul_(factor)

    def forward(self, x):
        return torch.sigmoid(x * self.scale)
