import cuda_extension
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # Same names as the reference, so its weights load into these.
        self.scale = nn.Parameter(torch.empty(features))
        self.shift = nn.Parameter(torch.empty(features))

    def forward(self, x):
        return cuda_extension.scale_tanh_mean_forward(x.contiguous(), self.scale, self.shift)
