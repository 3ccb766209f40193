"""Honest CUDA candidate for leaky_relu.py: one pass, 16-byte (float4) loads and stores."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void leaky_relu_kernel(const float4* __restrict__ in, float4* __restrict__ out,
                                  int64_t vectors, const float* __restrict__ tail_in,
                                  float* __restrict__ tail_out, int64_t tail, float slope) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    float4 v = in[i];
    v.x = v.x > 0.f ? v.x : v.x * slope;
    v.y = v.y > 0.f ? v.y : v.y * slope;
    v.z = v.z > 0.f ? v.z : v.z * slope;
    v.w = v.w > 0.f ? v.w : v.w * slope;
    out[i] = v;
  }
  if (blockIdx.x == 0 && threadIdx.x < tail) {
    const float v = tail_in[threadIdx.x];
    tail_out[threadIdx.x] = v > 0.f ? v : v * slope;
  }
}

torch::Tensor leaky_relu(torch::Tensor x, double negative_slope) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat, "expects contiguous fp32 CUDA");
  auto out = torch::empty_like(x);
  const int64_t n = x.numel(), vectors = n / 4, tail = n % 4;
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((vectors + threads - 1) / threads + 1, 132 * 16);
  leaky_relu_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(out.data_ptr<float>()),
      vectors, x.data_ptr<float>() + vectors * 4, out.data_ptr<float>() + vectors * 4, tail,
      static_cast<float>(negative_slope));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor leaky_relu(torch::Tensor x, double negative_slope);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("leaky_relu", &leaky_relu); }
"""

extension = load_inline("example_cuda_leaky_relu", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.leaky_relu(x.contiguous(), self.negative_slope)
