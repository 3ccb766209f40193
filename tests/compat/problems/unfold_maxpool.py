"""2-D max pooling with a 2x2 window and stride 2."""

import torch
import torch.nn as nn

batch_size = 4
channels = 6
height = width = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
