"""Attack, bounded: at import, write one file of CUDAAGENT_ATTACK_TARGET MiB in its scratch
directory, as a disk filler would; the file size limit must stop it first."""

import os
import tempfile

import torch
import torch.nn as nn

chunk = b"\0" * 1024**2
with tempfile.NamedTemporaryFile(delete=False) as filler:
    for _ in range(int(os.environ["CUDAAGENT_ATTACK_TARGET"])):
        filler.write(chunk)
        filler.flush()


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * self.negative_slope)
