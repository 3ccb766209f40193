"""Nested inputs: answers right, then appends to the list it was given (the structure of an input
changed, not only its values)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, params):
        scale, extra = params
        out = x * scale + extra["shift"]
        params.append(out.clone())
        return out
