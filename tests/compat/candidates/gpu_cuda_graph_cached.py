"""Caches one CUDA graph per input shape, captured on the first call of that shape over the
module's own parameters; each call copies its input in, replays, and returns a copy of the
static output (so no caller ever sees its storage change)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self._graphs = {}

    def _body(self, x):
        return F.gelu(F.linear(x, self.linear.weight, self.linear.bias)) * self.scale

    def _capture(self, x):
        static_input = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._body(static_input)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = self._body(static_input)
        return graph, static_input, static_output

    def forward(self, x):
        key = (tuple(x.shape), x.device)
        if key not in self._graphs:
            self._graphs[key] = self._capture(x)
        graph, static_input, static_output = self._graphs[key]
        static_input.copy_(x)
        graph.replay()
        return static_output.clone()
