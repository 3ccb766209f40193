"""Problem: a row softmax of a small batch (128 x 512) after a scale: two launches, a few us each."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(128, 512)]


def get_init_inputs():
    return [2.0]
