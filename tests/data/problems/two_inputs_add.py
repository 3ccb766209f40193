"""Two inputs, elementwise add: for input-mutation and alias tests."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs():
    return [torch.randn(64, 64), torch.randn(64, 64)]


def get_init_inputs():
    return []
