"""BatchNorm with its running statistics (what eval mode computes)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        scale = self.bn.weight * torch.rsqrt(self.bn.running_var + self.bn.eps)
        return (x - self.bn.running_mean) * scale + self.bn.bias
