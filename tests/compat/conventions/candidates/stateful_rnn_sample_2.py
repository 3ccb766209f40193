"""Wrong: starts every call from the initial hidden state (never keeps the new one), so only
the first call agrees with the reference."""

import torch
import torch.nn as nn

batch_size = 8


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden.to(x.device)), dim=1)))
        return self.h2o(hidden)
