"""Test candidate: zeroes every shared-memory tensor its process can reach (what it was sent:
weights, init inputs, input sets) when constructed and at every call, then answers with the
reference's Linear + ReLU. In a batch sharing the reference, the next candidate must not see any
of it (evaluation.py sends each candidate copies)."""

import gc

import torch
import torch.nn as nn


def _zero_shared() -> None:
    for found in gc.get_objects():
        if isinstance(found, torch.Tensor) and found.is_shared():
            with torch.no_grad():
                found.zero_()


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        _zero_shared()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _zero_shared()
        return torch.relu(self.linear(x))
