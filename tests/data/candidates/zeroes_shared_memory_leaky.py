"""Test candidate: zeroes every shared-memory tensor its process can reach (what it was sent) when
constructed and at every call, then answers with PyTorch's leaky ReLU. In a batch sharing the
reference, the next candidate must not see any of it (evaluation.py sends each candidate copies)."""

import gc

import torch
import torch.nn as nn


def _zero_shared() -> None:
    for found in gc.get_objects():
        if isinstance(found, torch.Tensor) and found.is_shared():
            with torch.no_grad():
                found.zero_()


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope
        _zero_shared()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _zero_shared()
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
