"""Test candidate: the reference's leaky ReLU in PyTorch (passes under the permissive policy on
the CPU), printing when and in which process it was imported (its "build"), so a test can tell
whether its worker started before its evaluation did (tests/evaluator/test_start_ahead.py).
Its pid is 1 in the sandbox's pid namespace, so the time tells the workers apart."""

import time

import torch
import torch.nn as nn

print(f"imported at {time.time():.6f}", flush=True)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
