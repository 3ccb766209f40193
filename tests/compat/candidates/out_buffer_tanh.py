"""Writes into one persistent output buffer (`out=`), allocated on the first call: every call
recomputes it, and returns the same storage."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._out = None

    def forward(self, x):
        if self._out is None or self._out.shape != x.shape or self._out.device != x.device:
            self._out = torch.empty_like(x)
        return torch.tanh(x, out=self._out)
