"""Problem: a large fp32 GEMM with bias and ReLU (matmul TF32 changes its time)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return [4096, 4096]
