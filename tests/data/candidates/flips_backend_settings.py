"""Test candidate: the reference's own leaky ReLU, but forward turns cudnn.benchmark and matmul TF32 on,
as published solutions do to earn a speedup from a flag."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
