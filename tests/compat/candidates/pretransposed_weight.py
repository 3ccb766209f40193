"""Keeps the layer, and a pre-transposed copy of its weight for addmm."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.register_buffer("weight_t", self.fc.weight.detach().t().contiguous())

    def forward(self, x):
        return F.gelu(torch.addmm(self.fc.bias, x, self.weight_t))
