"""A probe, not a cheat: the reference's leaky ReLU, failing unless its process tells Kineto to
detach CUPTI when a profiler session ends (TEARDOWN_CUPTI=1, set by every worker: see
TimingConfig.cupti_teardown)."""

import os

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        if os.environ.get("TEARDOWN_CUPTI") != "1":
            raise RuntimeError("CUPTI would stay attached after the device-time profile")
        return F.leaky_relu(x, self.negative_slope)
