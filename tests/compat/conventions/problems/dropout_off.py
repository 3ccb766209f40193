"""Linear layer followed by Dropout with p=0 (an identity in either mode)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 32


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(p=0.0)

    def forward(self, x):
        return self.dropout(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
