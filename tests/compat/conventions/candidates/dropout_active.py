"""Calls dropout the way nn.Dropout does, so under the same seed it draws the same mask."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.dropout_p = dropout_p

    def forward(self, x):
        y = F.linear(x, self.linear.weight, self.linear.bias)
        return F.dropout(y, p=self.dropout_p, training=self.training)
