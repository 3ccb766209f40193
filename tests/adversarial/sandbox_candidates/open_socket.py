"""Attack: at import, connect to a listener on the host's loopback (the test's own) and send."""

import os
import socket

import torch
import torch.nn as nn

with socket.create_connection(("127.0.0.1", int(os.environ["CUDAAGENT_ATTACK_TARGET"])), timeout=5) as connection:
    connection.sendall(b"exfiltrated")


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * self.negative_slope)
