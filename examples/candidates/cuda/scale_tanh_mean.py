"""Honest CUDA candidate for scale_tanh_mean.py: scale, shift, tanh and the row mean fused into
one kernel (one block per row), where eager runs four kernels and writes three intermediates."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void scale_tanh_mean_kernel(const float* __restrict__ x, const float* __restrict__ scale,
                                       const float* __restrict__ shift, float* __restrict__ out, int cols) {
  const float* row = x + (int64_t)blockIdx.x * cols;
  float total = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) total += tanhf(fmaf(row[i], scale[i], shift[i]));
  for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffff, total, offset);
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = total;
  __syncthreads();
  if (warp == 0) {
    total = lane < blockDim.x / 32 ? partial[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffff, total, offset);
    if (lane == 0) out[blockIdx.x] = total / cols;
  }
}

torch::Tensor scale_tanh_mean(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous(), "expects a contiguous CUDA matrix");
  auto out = torch::empty({x.size(0)}, x.options());
  scale_tanh_mean_kernel<<<(unsigned)x.size(0), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), scale.data_ptr<float>(), shift.data_ptr<float>(), out.data_ptr<float>(), (int)x.size(1));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor scale_tanh_mean(torch::Tensor x, torch::Tensor scale, torch::Tensor shift);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale_tanh_mean", &scale_tanh_mean); }
"""

extension = load_inline("example_cuda_scale_tanh_mean", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.scale_tanh_mean(x.contiguous(), self.scale, self.shift)
