"""A reference whose answer moves with the backend's precision settings, as an ill-conditioned
network's does (KernelBench's level-3 EfficientNetB2: BatchNorm over two samples of a 1x1 map
turns cuDNN TF32's rounding into other signs). Here the dependence is written out, so that it
shows on the CPU, where no operator rounds to TF32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + (1.0 if torch.backends.cudnn.allow_tf32 else 0.0)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
