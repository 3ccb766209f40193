"""GEMM with an epilogue: Linear(1024 -> 512) with bias, then ReLU, on a batch of 256."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return [1024, 512]
