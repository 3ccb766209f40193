"""A hand-made affine map whose parameters are drawn with torch.randn, then tanh."""

import torch
import torch.nn as nn

batch_size = 8
in_features = 16
out_features = 24


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        return torch.tanh(x @ self.weight.t() + self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
