"""BatchNorm in training mode written out: normalises with the batch's statistics and updates
the running statistics in place as nn.BatchNorm1d does (its buffers change every call; its
output does not depend on them)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        y = self.linear(x)
        mean = y.mean(dim=0)
        var = y.var(dim=0, unbiased=False)
        if self.training:
            momentum = self.bn.momentum
            count = y.shape[0]
            self.bn.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
            self.bn.running_var.mul_(1 - momentum).add_(var * count / (count - 1), alpha=momentum)
            self.bn.num_batches_tracked.add_(1)
        y = (y - mean) * torch.rsqrt(var + self.bn.eps) * self.bn.weight + self.bn.bias
        return torch.relu(y)
