"""Test candidate: returns a tensor of the wrong shape."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        return torch.empty(3)
