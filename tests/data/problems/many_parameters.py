"""A model with 1200 parameter tensors, as many as a deep CNN's state dict (KernelBench level 3's
DenseNets): the evaluator receives each in shared memory, one file descriptor apiece."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(layer(x) for layer in self.layers)


def get_inputs():
    return [torch.randn(8, 4)]


def get_init_inputs():
    return [600]
