"""Attack: at import, kill its parent process and the process CUDAAGENT_ATTACK_TARGET names (the
test's stand-in for the evaluator, a process of the same user)."""

import os
import signal

import torch
import torch.nn as nn

for pid in (os.getppid(), int(os.environ["CUDAAGENT_ATTACK_TARGET"])):
    if pid > 1:
        os.kill(pid, signal.SIGKILL)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * self.negative_slope)
