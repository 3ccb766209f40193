"""Attack: at import, plant a file in another candidate's build directory."""

import os
from pathlib import Path

import torch
import torch.nn as nn

Path(os.environ["CUDAAGENT_ATTACK_TARGET"], "planted.so").write_bytes(b"\x7fELF planted")


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * self.negative_slope)
