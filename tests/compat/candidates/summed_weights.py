"""Sums the two branches' weights and biases once: one matrix product instead of two."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        branch_a = nn.Linear(in_features, out_features)
        branch_b = nn.Linear(in_features, out_features)
        self.register_buffer("weight", (branch_a.weight + branch_b.weight).detach())
        self.register_buffer("bias", (branch_a.bias + branch_b.bias).detach())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)
