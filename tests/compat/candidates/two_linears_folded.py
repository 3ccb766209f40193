"""No activation between the two layers, so they are one: fc2's weight and bias folded into
fc1's own parameters in `__init__`, fc2 kept only as drawn (for the seed's order) and unused."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc1 = nn.Linear(features, features)
        fc2 = nn.Linear(features, features)
        with torch.no_grad():
            self.fc1.bias.copy_(fc2.weight @ self.fc1.bias + fc2.bias)
            self.fc1.weight.copy_(fc2.weight @ self.fc1.weight)

    def forward(self, x):
        return F.relu(self.fc1(x))
