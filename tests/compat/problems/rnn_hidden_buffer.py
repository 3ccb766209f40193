"""An RNN cell whose hidden state is a registered buffer, updated in place by every call (so it
moves with the model and sits in its state_dict)."""

import torch
import torch.nn as nn

batch_size = 8
input_size = 16
hidden_size = 32


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.register_buffer("hidden", torch.randn(batch_size, hidden_size))
        self.cell = nn.RNNCell(input_size, hidden_size)

    def forward(self, x):
        self.hidden.copy_(self.cell(x, self.hidden))
        return self.hidden.clone()


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
