"""The cell written out (two matmuls and tanh), its hidden-state buffer updated in place as the
reference's is."""

import torch
import torch.nn as nn

batch_size = 8


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.register_buffer("hidden", torch.randn(batch_size, hidden_size))
        self.cell = nn.RNNCell(input_size, hidden_size)

    def forward(self, x):
        cell = self.cell
        pre = torch.addmm(cell.bias_ih + cell.bias_hh, x, cell.weight_ih.t())
        self.hidden.copy_(torch.tanh(torch.addmm(pre, self.hidden, cell.weight_hh.t())))
        return self.hidden.clone()
