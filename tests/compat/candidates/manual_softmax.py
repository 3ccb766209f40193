"""Softmax written out: subtract the row maximum, exponentiate, normalise."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        shifted = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return shifted / shifted.sum(dim=-1, keepdim=True)
