"""mlp_gelu_layernorm with an own CUDA kernel built by load_inline (torch/extension.h): the second
GEMM's bias and the residual add in one kernel on torch's current stream; the rest PyTorch glue."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_residual_kernel(const float* y, const float* bias, const float* x, float* out,
                                     long n, long features) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = y[i] + bias[i % features] + x[i];
}

torch::Tensor bias_residual(torch::Tensor y, torch::Tensor bias, torch::Tensor x) {
    auto out = torch::empty_like(y);
    long n = y.numel();
    int threads = 256;
    bias_residual_kernel<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), x.data_ptr<float>(), out.data_ptr<float>(), n, y.size(1));
    return out;
}
"""
cpp_source = "torch::Tensor bias_residual(torch::Tensor y, torch::Tensor bias, torch::Tensor x);"
extension = load_inline(name="launch_bound_bias_residual", cpp_sources=cpp_source, cuda_sources=cuda_source,
                        functions=["bias_residual"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(features, hidden)
        self.down = nn.Linear(hidden, features)
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        down = F.linear(F.gelu(self.up(x)), self.down.weight)
        return self.norm(extension.bias_residual(down.contiguous(), self.down.bias, x.contiguous()))
