"""LeakyReLU, scaled, plus the input as a residual."""

import torch
import torch.nn as nn

batch_size = 16
dim = 1024
negative_slope = 0.1
scale = 2.0


class Model(nn.Module):
    def __init__(self, negative_slope, scale):
        super().__init__()
        self.negative_slope = negative_slope
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.negative_slope) * self.scale + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope, scale]
