"""Test candidate: never returns from forward."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        while True:
            pass
