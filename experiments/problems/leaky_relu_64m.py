"""Elementwise: leaky ReLU over a 64M-element fp32 tensor (memory-bound, 512 MiB moved)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, self.negative_slope)


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return [0.01]
