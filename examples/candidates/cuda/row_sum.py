"""Honest CUDA candidate for row_sum.py: one block per row, float4 loads, warp-shuffle reduction."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

// Block-wide sum; every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? partial[lane] : 0.f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  const float total = partial[0];
  __syncthreads();
  return total;
}

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols) {
  const float* row = x + (int64_t)blockIdx.x * cols;
  float total = 0.f;
  if (cols % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      const float4 v = row4[i];
      total += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) total += row[i];
  }
  total = block_sum(total);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

torch::Tensor row_sum(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "expects a contiguous fp32 CUDA matrix");
  auto out = torch::empty({x.size(0)}, x.options());
  row_sum_kernel<<<(unsigned)x.size(0), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor row_sum(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("row_sum", &row_sum); }
"""

extension = load_inline("example_cuda_row_sum", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.row_sum(x.contiguous())
