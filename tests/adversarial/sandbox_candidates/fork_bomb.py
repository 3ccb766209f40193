"""Attack, bounded: at import, fork up to CUDAAGENT_ATTACK_TARGET children that each sleep, as a
fork bomb would; the process limit must stop it first."""

import os
import time

import torch
import torch.nn as nn

for _ in range(int(os.environ["CUDAAGENT_ATTACK_TARGET"])):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * self.negative_slope)
