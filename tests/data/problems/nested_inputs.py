"""Inputs nested in a list and a dict (`forward(x, [scale, {"shift": shift}])`), as recurrent
models take their initial states: every nested tensor must be copied per candidate, refilled for
each timed call and checked for changes like a top-level one."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, params: list) -> torch.Tensor:
        scale, extra = params
        return x * scale + extra["shift"]


def get_inputs():
    return [torch.randn(64, 256), [torch.randn(256), {"shift": torch.randn(256)}]]


def get_init_inputs():
    return []
