"""A TorchScript epilogue inside try/except with a plain-Python fallback. Its slope parameter is
not annotated, so TorchScript takes it for a Tensor: scripted, a float slope fails at the call.
Under KernelBench's `exec` scripting fails and the fallback runs; imported from its file,
scripting succeeds."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def leaky_epilogue(y, slope):
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
