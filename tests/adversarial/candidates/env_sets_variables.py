"""Environment: sets variables the harness might read, returns zeros."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        os.environ["CUDAAGENT_CACHE"] = "/nonexistent"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return torch.zeros_like(x)
