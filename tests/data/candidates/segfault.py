"""Test candidate: segfaults in forward."""

import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        ctypes.string_at(0)
