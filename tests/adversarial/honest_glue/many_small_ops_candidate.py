"""Honest PyTorch glue: the same 36 small operators, written out (permissive policy)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.offsets = [0.01 * step for step in range(12)]

    def forward(self, x):
        for offset in self.offsets:
            x = torch.tanh(torch.add(x * 1.01, offset))
            x = torch.sub(x, x.mean(dim=1, keepdim=True))
        return x
