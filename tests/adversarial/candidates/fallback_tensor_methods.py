"""Fallback: tensor methods do the work."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        return x.clamp(min=0) + x.clamp(max=0).mul(self.slope)
