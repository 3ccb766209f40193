"""Matrix multiply (KernelBench level-1 style)."""

import torch
import torch.nn as nn

M = 32
K = 48
N = 40


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
