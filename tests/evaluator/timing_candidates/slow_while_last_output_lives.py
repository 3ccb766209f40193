"""A probe, not a cheat: computes the reference's answer, but each call that finds the previous
call's output still alive sleeps 50 ms. The harness drops every timed output (after copying it)
before the next timed call, so timed calls never sleep; a harness that held the output would
have its allocator hand the next call fresh pages (timed as the candidate's) and makes this
candidate time at milliseconds."""

import time
import weakref

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope
        self._previous = None

    def forward(self, x):
        if self._previous is not None and self._previous() is not None:
            time.sleep(0.05)
        output = F.leaky_relu(x, self.negative_slope)
        self._previous = weakref.ref(output)
        return output
