"""A probe problem (tests/evaluator/test_host_quiet.py): leaky ReLU whose forward sleeps 50 ms
whenever it runs on the CPUs its model was built on. Built in the reference's untimed work, it is
fast only where a timing moved its process onto the reserved cores (host_quiet.py)."""

import os
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope
        self.built_on = os.sched_getaffinity(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.sched_getaffinity(0) == self.built_on:
            time.sleep(0.05)
        return torch.nn.functional.leaky_relu(x, self.negative_slope)


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return [0.01]
