"""The MLP as two named layers (fc1, fc2) instead of nn.Sequential, ReLU in place."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        return self.fc2(torch.relu_(self.fc1(x)))
