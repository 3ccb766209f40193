"""Switches `torch.backends` flags in `__init__` as tuned solutions do (cuDNN autotuning on, its
deterministic mode off, full-precision matmuls asked for), then runs the same operators."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1).flatten(1)
