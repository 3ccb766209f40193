"""Test candidate: segfaults in forward."""

import torch
import torch.nn as nn
import ctypes

class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        ctypes.string_at(0)
