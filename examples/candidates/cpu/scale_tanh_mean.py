"""Honest C++ (CPU) candidate for scale_tanh_mean.py: scale, shift, tanh and the row mean in one
pass, with no intermediate tensor."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <cmath>
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

torch::Tensor scale_tanh_mean(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "expects a contiguous matrix");
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty({rows}, x.options());
  const float* in = x.data_ptr<float>();
  const float* s = scale.data_ptr<float>();
  const float* t = shift.data_ptr<float>();
  float* result = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * cols;
    double total = 0.0;
    for (int64_t c = 0; c < cols; ++c) total += std::tanh(row[c] * s[c] + t[c]);
    result[r] = static_cast<float>(total / cols);
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale_tanh_mean", &scale_tanh_mean); }
"""

extension = load_inline("example_cpu_scale_tanh_mean", cpp_sources=[SOURCE], extra_cflags=["-O3"],
                        no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.scale_tanh_mean(x.contiguous(), self.scale, self.shift)
