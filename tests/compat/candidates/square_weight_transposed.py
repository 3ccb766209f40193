"""The layer's weight transposed once, in place, under its own name (`linear.weight` of the same
square shape, holding W^T), so forward multiplies without a transpose."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.linear.weight.data = self.linear.weight.data.t().contiguous()

    def forward(self, x):
        return F.gelu(torch.addmm(self.linear.bias, x, self.linear.weight))
