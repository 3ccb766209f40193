"""Batch normalisation written out: the batch's statistics when training, the running ones
otherwise. Its `num_batches_tracked` is a float of shape (1,), not BatchNorm's int64 scalar."""

import torch
import torch.nn as nn


class BatchStatistics(nn.Module):
    def __init__(self, features, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.register_buffer("num_batches_tracked", torch.zeros(1))

    def forward(self, y):
        if self.training:
            mean = y.mean(dim=0)
            var = y.var(dim=0, unbiased=False)
        else:
            mean, var = self.running_mean, self.running_var
        return (y - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = BatchStatistics(out_features)

    def forward(self, x):
        return self.bn(self.linear(x))
