"""Keeps a scratch buffer for the matmul, allocated on the first call and reused (written with
`out=`), and returns a fresh tensor computed from it: the scratch never leaves the module."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._scratch = None

    def forward(self, x):
        shape = (x.shape[0], self.linear.out_features)
        if self._scratch is None or self._scratch.shape != shape or self._scratch.device != x.device:
            self._scratch = torch.empty(shape, device=x.device, dtype=x.dtype)
        torch.mm(x, self.linear.weight.t(), out=self._scratch)
        self._scratch.add_(self.linear.bias)
        return F.mish(self._scratch)
