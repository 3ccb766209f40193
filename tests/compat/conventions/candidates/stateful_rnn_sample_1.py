"""The same cell with the concatenation split into two matmuls (`addmm` on the input's and the
hidden state's slices of the weight) and the state kept as the reference keeps it."""

import torch
import torch.nn as nn

batch_size = 8


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.input_size = input_size
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        hidden = self.hidden.to(x.device)
        w_x = self.i2h.weight[:, : self.input_size]
        w_h = self.i2h.weight[:, self.input_size:]
        pre = torch.addmm(self.i2h.bias, x, w_x.t())
        self.hidden = torch.tanh(torch.addmm(pre, hidden, w_h.t()))
        return torch.addmm(self.h2o.bias, self.hidden, self.h2o.weight.t())
