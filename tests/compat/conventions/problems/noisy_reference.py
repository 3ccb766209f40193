"""A reference that disagrees with itself: it adds noise from a generator of its own, seeded
from the operating system when built, so no seed set from outside reproduces its answer."""

import os

import torch
import torch.nn as nn

batch_size = 8
dim = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))

    def forward(self, x):
        noise = torch.randn(x.shape, generator=self.generator).to(x.device)
        return x + noise


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
