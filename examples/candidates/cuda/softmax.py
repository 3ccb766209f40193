"""Honest CUDA candidate for softmax.py: one block per row; one read pass keeps a running max and
rescaled sum (online softmax), a second pass writes exp(x - max) / sum."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

struct MaxSum { float max; float sum; };

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  const float sa = a.max == -INFINITY ? 0.f : a.sum * __expf(a.max - m);
  const float sb = b.max == -INFINITY ? 0.f : b.sum * __expf(b.max - m);
  return {m, sa + sb};
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
  const float* row = x + (int64_t)blockIdx.x * cols;
  float* dst = out + (int64_t)blockIdx.x * cols;
  MaxSum state{-INFINITY, 0.f};
  for (int i = threadIdx.x; i < cols; i += blockDim.x) state = combine(state, MaxSum{row[i], 1.f});
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffff, state.max, offset), __shfl_xor_sync(0xffffffff, state.sum, offset)};
    state = combine(state, other);
  }
  __shared__ MaxSum partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = state;
  __syncthreads();
  if (warp == 0) {
    state = lane < blockDim.x / 32 ? partial[lane] : MaxSum{-INFINITY, 0.f};
    for (int offset = 16; offset > 0; offset >>= 1) {
      MaxSum other{__shfl_xor_sync(0xffffffff, state.max, offset), __shfl_xor_sync(0xffffffff, state.sum, offset)};
      state = combine(state, other);
    }
    if (lane == 0) partial[0] = state;
  }
  __syncthreads();
  const float row_max = partial[0].max, inverse = 1.f / partial[0].sum;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = __expf(row[i] - row_max) * inverse;
}

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "expects a contiguous fp32 CUDA matrix");
  auto out = torch::empty_like(x);
  softmax_kernel<<<(unsigned)x.size(0), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), (int)x.size(1));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor softmax_rows(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("softmax_rows", &softmax_rows); }
"""

extension = load_inline("example_cuda_softmax", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.softmax_rows(x.contiguous())
