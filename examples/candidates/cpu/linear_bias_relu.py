"""Honest C++ (CPU) candidate for linear_bias_relu.py: an i-k-j loop GEMM with the bias and ReLU
applied in the same pass over each output row."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <algorithm>
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

// out[b, o] = relu(sum_i x[b, i] * weight[o, i] + bias[o])
torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(), "expects contiguous inputs");
  const int64_t batch = x.size(0), in_features = x.size(1), out_features = weight.size(0);
  auto out = torch::empty({batch, out_features}, x.options());
  const float* xs = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  float* result = out.data_ptr<float>();
  for (int64_t row = 0; row < batch; ++row) {
    const float* xrow = xs + row * in_features;
    float* dst = result + row * out_features;
    for (int64_t o = 0; o < out_features; ++o) {
      const float* wrow = w + o * in_features;
      float total = 0.f;
      for (int64_t i = 0; i < in_features; ++i) total += xrow[i] * wrow[i];
      dst[o] = std::max(total + b[o], 0.f);
    }
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("linear_bias_relu", &linear_bias_relu); }
"""

extension = load_inline("example_cpu_linear_bias_relu", cpp_sources=[SOURCE],
                        extra_cflags=["-O3", "-march=native", "-ffast-math"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds the weights; never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.linear_bias_relu(x.contiguous(), self.linear.weight, self.linear.bias)
