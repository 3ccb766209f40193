"""ReLU over 1 GiB, as KernelBench's level 1 sizes its element-wise problems: heavy on the host."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1 << 28)]


def get_init_inputs():
    return []
