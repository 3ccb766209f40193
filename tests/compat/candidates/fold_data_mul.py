"""`x * s + x` is `x * (1 + s)`: the factor goes into the Gemm's weight and bias through
`.data` once, in `__init__`; forward is one `addmm`."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.gemm.weight.data *= 1.0 + scaling_factor
        self.gemm.bias.data *= 1.0 + scaling_factor

    def forward(self, x):
        return torch.addmm(self.gemm.bias, x, self.gemm.weight.t())
