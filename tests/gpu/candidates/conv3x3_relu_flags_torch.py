"""The reference's own operators under the flags published solutions set to earn a speedup
(cudnn.benchmark, TF32 for matmuls): a candidate whose only gain is a flag (permissive policy)."""

import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))
