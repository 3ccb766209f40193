"""Each point's distance to its nearest neighbour in another set: a 4 GiB distance matrix."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cdist(x, y).min(dim=1).values


def get_inputs():
    return [torch.randn(32768, 64), torch.randn(32768, 64)]


def get_init_inputs():
    return []
