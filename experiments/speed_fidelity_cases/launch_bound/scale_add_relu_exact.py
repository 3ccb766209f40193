"""scale_add_relu as the same four operators written in place-friendly glue (torch.add with alpha,
then in-place ReLU and scale): eager's kernels, one launch fewer."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.add(y, x, alpha=self.alpha)
        return out.relu_().mul_(self.beta)
