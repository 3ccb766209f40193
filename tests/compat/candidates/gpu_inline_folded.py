"""The divisor folded into the layer's own weight and bias through `.data` in `__init__`; the
GEMM is cuBLAS (`F.linear`), the ReLU one CUDA kernel built with load_inline."""

import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void compat_folded_relu_kernel(float* __restrict__ data, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    data[i] = fmaxf(data[i], 0.f);
  }
}

torch::Tensor relu_in_place(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat, "expects contiguous fp32 CUDA");
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 132 * 32);
  compat_folded_relu_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return x;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor relu_in_place(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_in_place", &relu_in_place); }
"""

extension = load_inline("compat_folded_relu", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, divisor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.linear.weight.data.div_(divisor)
        self.linear.bias.data.div_(divisor)

    def forward(self, x):
        return extension.relu_in_place(F.linear(x, self.linear.weight, self.linear.bias).contiguous())
