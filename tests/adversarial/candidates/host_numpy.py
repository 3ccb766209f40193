"""Host compute: NumPy does the work."""

import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        values = np.asarray(x)
        return torch.from_numpy(np.where(values > 0, values, values * self.slope))
