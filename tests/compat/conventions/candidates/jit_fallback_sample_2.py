"""The same try/except TorchScript epilogue with its slope annotated as a float: right whether
scripting succeeds (imported from a file) or fails (KernelBench's `exec`)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def leaky_epilogue(y: torch.Tensor, slope: float) -> torch.Tensor:
    return torch.where(y > 0, y, y * slope)


try:
    leaky_epilogue = torch.jit.script(leaky_epilogue)
except Exception:
    pass


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, negative_slope):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope

    def forward(self, x):
        return leaky_epilogue(F.linear(x, self.linear.weight, self.linear.bias), self.negative_slope)
