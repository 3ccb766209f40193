"""Captures the element-wise chain once in a CUDA graph with a static input and a static output;
each call copies its input in, replays the graph, and returns the static output."""

import torch
import torch.nn as nn


def chain(x):
    x = x * 2.0 + 1.0
    x = torch.relu(x)
    x = torch.tanh(x) - 0.5
    return x * x


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._graph = None
        self._static_input = None
        self._static_output = None

    def _capture(self, x):
        self._static_input = x.clone()
        warmup = torch.cuda.Stream()
        warmup.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warmup):  # capture needs the kernels loaded and the allocator warm
            for _ in range(2):
                chain(self._static_input)
        torch.cuda.current_stream().wait_stream(warmup)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_output = chain(self._static_input)

    def forward(self, x):
        if self._graph is None or self._static_input.shape != x.shape:
            self._capture(x)
        self._static_input.copy_(x)
        self._graph.replay()
        return self._static_output
