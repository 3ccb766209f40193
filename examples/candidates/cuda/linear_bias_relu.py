"""Honest CUDA candidate for linear_bias_relu.py: the GEMM through cuBLAS in full fp32 (allowed
for GEMM by the strict policy), then one kernel that adds the bias and applies ReLU in place."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void bias_relu_kernel(float* __restrict__ out, const float* __restrict__ bias, int64_t total, int features) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
    out[i] = fmaxf(out[i] + bias[i % features], 0.f);
}

static cublasHandle_t blas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t created;
    TORCH_CHECK(cublasCreate(&created) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    // Full fp32: no TF32 tensor-core shortcut on an fp32 problem.
    cublasSetMathMode(created, CUBLAS_PEDANTIC_MATH);
    return created;
  }();
  return handle;
}

// out[b, o] = relu(sum_i x[b, i] * weight[o, i] + bias[o]); row-major tensors seen by column-major
// cuBLAS as out^T = weight * x^T.
torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && weight.is_contiguous(), "expects contiguous CUDA tensors");
  const int batch = (int)x.size(0), in_features = (int)x.size(1), out_features = (int)weight.size(0);
  auto out = torch::empty({batch, out_features}, x.options());
  auto stream = c10::cuda::getCurrentCUDAStream();
  cublasHandle_t handle = blas_handle();
  cublasSetStream(handle, stream);
  const float one = 1.f, zero = 0.f;
  TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_features, batch, in_features, &one,
                          weight.data_ptr<float>(), in_features, x.data_ptr<float>(), in_features, &zero,
                          out.data_ptr<float>(), out_features) == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed");
  const int64_t total = (int64_t)batch * out_features;
  bias_relu_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(out.data_ptr<float>(), bias.data_ptr<float>(), total, out_features);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("linear_bias_relu", &linear_bias_relu); }
"""

extension = load_inline("example_cuda_linear_bias_relu", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], extra_ldflags=["-lcublas"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds the weights; never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.linear_bias_relu(x.contiguous(), self.linear.weight, self.linear.bias)
