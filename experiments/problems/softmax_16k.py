"""Softmax over the rows of a (16384, 4096) fp32 matrix (512 MiB moved)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(16384, 4096) * 3]


def get_init_inputs():
    return []
