"""Host compute: NumPy ufuncs on a memoryview of the tensor."""

import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        np.maximum(x.numpy(), x.numpy() * self.slope, out=out.numpy())
        return out
