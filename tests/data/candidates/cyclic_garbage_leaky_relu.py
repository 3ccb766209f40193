"""Test candidate: the reference's leaky ReLU in PyTorch, whose forward also leaves reference cycles
behind (as code that builds small graphs of Python objects per call does): garbage only Python's
cyclic collector frees (tests/evaluator/test_timed_loop_steps.py)."""

import torch
import torch.nn as nn


class _Node:
    def __init__(self):
        self.partner = None


def _cycles(count: int) -> None:
    for _ in range(count):
        first, second = _Node(), _Node()
        first.partner, second.partner = second, first


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _cycles(2000)
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
