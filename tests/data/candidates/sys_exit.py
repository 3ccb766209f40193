"""Test candidate: calls sys.exit(0) in forward, hoping to pass as success."""

import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        sys.exit(0)
