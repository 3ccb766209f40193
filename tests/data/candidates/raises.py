"""Test candidate: raises in forward."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        raise ValueError('the candidate failed on purpose')
