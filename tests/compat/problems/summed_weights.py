"""Two linear branches over the same input, added."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 32


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.branch_a = nn.Linear(in_features, out_features)
        self.branch_b = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.branch_a(x) + self.branch_b(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
