"""Test candidate: the reference's leaky ReLU, but forward sleeps for a minute while the
environment it was started with has CUDAAGENT_TEST_SLEEP_IN_FORWARD (tests/evaluator/
test_outside_kill.py kills its process during that sleep, then drops the variable)."""

import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("CUDAAGENT_TEST_SLEEP_IN_FORWARD"):
            time.sleep(60)
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
