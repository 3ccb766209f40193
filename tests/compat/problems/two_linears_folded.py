"""Two square linear layers back to back, then ReLU (KernelBench level-3 MLP style)."""

import torch
import torch.nn as nn

batch_size = 16
features = 24


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc1 = nn.Linear(features, features)
        self.fc2 = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.fc2(self.fc1(x)))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
