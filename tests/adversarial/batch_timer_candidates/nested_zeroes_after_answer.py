"""Nested inputs: answers right, then zeroes the scale and shift nested in its second input. Before
#44 the nested tensors were neither copied per candidate nor checked: in a batch this poisoned the
kept reference's trial sets, and the next honest candidate got `nondeterministic_reference`."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, params):
        scale, extra = params
        out = x * scale + extra["shift"]
        scale.zero_()
        extra["shift"].zero_()
        return out
