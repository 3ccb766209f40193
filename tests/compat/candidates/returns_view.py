"""Computes (B^T A^T) in its own layout and returns the transposed view of it: a
non-contiguous output of the right shape."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.mm(B.t().contiguous(), A.t().contiguous()).t()
