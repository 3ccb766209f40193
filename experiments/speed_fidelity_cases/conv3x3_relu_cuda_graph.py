"""conv3x3_relu in the CUDA-graph style: convolution and own ReLU captured once, replayed on a static input."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


def relu(x: torch.Tensor) -> torch.Tensor:
    """Elementwise over the storage: empty_like keeps a dense tensor's layout (channels_last too)."""
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out



class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.graph = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.graph is None or self.static_input.shape != x.shape:
            self.static_input = x.clone()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                relu(self.conv(self.static_input))  # warm-up outside the graph
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_output = relu(self.conv(self.static_input))
        self.static_input.copy_(x)
        self.graph.replay()
        return self.static_output.clone()
