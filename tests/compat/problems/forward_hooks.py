"""Linear layer on a scaled input, then an offset and a SiLU (KernelBench level-2 style)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 32
out_features = 16
input_scale = 0.5
offset = 0.1


class Model(nn.Module):
    def __init__(self, in_features, out_features, input_scale, offset):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.input_scale = input_scale
        self.offset = offset

    def forward(self, x):
        return torch.nn.functional.silu(self.linear(x * self.input_scale) + self.offset)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, input_scale, offset]
