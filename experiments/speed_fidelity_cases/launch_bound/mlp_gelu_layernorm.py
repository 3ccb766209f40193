"""Problem: a small residual MLP block (batch 64, 256 -> 1024 -> 256, GELU, LayerNorm): six launches,
under 50 us of kernels."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(features, hidden)
        self.down = nn.Linear(hidden, features)
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256, 1024]
