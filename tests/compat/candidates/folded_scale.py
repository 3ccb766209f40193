"""Folds the scale into the weights once, in __init__; keeps only the folded buffers."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        linear = nn.Linear(in_features, out_features)
        self.register_buffer("weight", linear.weight.detach() * scaling_factor)
        self.register_buffer("bias", linear.bias.detach() * scaling_factor)

    def forward(self, x):
        return torch.relu(F.linear(x, self.weight, self.bias))
