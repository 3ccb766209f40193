"""Max pooling as unfold into 2x2 windows and a max over each window."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        windows = x.unfold(2, 2, 2).unfold(3, 2, 2)
        return windows.amax(dim=(-1, -2))
