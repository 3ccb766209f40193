"""BatchNorm1d over a batch of one: training mode cannot normalise a single value per channel."""

import torch
import torch.nn as nn

batch_size = 1
features = 8


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
