"""Layer normalisation over the last dimension."""

import torch
import torch.nn as nn

batch_size = 8
seq_len = 10
hidden = 64


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
