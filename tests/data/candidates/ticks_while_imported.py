"""Test candidate: the reference's leaky ReLU in PyTorch (passes under the permissive policy on
the CPU) whose import (its "build") runs for up to two minutes, ticking on the host's monotonic
clock every millisecond; where two ticks are more than 20 ms apart it prints `gap <from> <to>`
(ns), so a test can tell when its worker was stopped while another candidate was timed
(tests/evaluator/test_start_ahead.py). The test closes its worker long before the two minutes."""

import time

import torch
import torch.nn as nn

_GAP_NS = 20_000_000
_last = time.monotonic_ns()
_until = _last + 120_000_000_000
while _last < _until:
    time.sleep(0.001)
    now = time.monotonic_ns()
    if now - _last > _GAP_NS:
        print(f"gap {_last} {now}", flush=True)
    _last = now


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
