"""Test candidate: the reference's Linear + ReLU in PyTorch (passes under the permissive policy on
the CPU; contiguous inputs), printing a digest of each input it has not seen before and one of its weights, so a
test can tell from Result.log which inputs and weights two evaluations shared."""

import ctypes
import hashlib

import torch
import torch.nn as nn

_seen: set[str] = set()


def _digest(tensor: torch.Tensor) -> str:
    # Its bytes read through the pointer (CPU tensors, as in the tests): no operator, so the
    # candidate stays honest in the guard's eyes.
    return hashlib.sha256(ctypes.string_at(tensor.data_ptr(), tensor.nbytes)).hexdigest()[:16]


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "weights" not in _seen:
            _seen.add("weights")
            print("weights", _digest(self.linear.weight), flush=True)
        digest = _digest(x)
        if digest not in _seen:
            _seen.add(digest)
            print("input", digest, flush=True)
        return torch.relu(self.linear(x))
