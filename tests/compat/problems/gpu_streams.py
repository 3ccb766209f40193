"""Two independent linear branches, concatenated."""

import torch
import torch.nn as nn

batch_size = 64
in_features = 512
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.left = nn.Linear(in_features, out_features)
        self.right = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.cat([torch.relu(self.left(x)), torch.sigmoid(self.right(x))], dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
