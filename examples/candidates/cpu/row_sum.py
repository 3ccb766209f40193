"""Honest C++ (CPU) candidate for row_sum.py: one accumulator per row, in double."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

torch::Tensor row_sum(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat, "expects a contiguous fp32 matrix");
  const int64_t rows = x.size(0), cols = x.size(1);
  auto out = torch::empty({rows}, x.options());
  const float* in = x.data_ptr<float>();
  float* result = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0.0;
    const float* row = in + r * cols;
    for (int64_t c = 0; c < cols; ++c) total += row[c];
    result[r] = static_cast<float>(total);
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("row_sum", &row_sum); }
"""

extension = load_inline("example_cpu_row_sum", cpp_sources=[SOURCE], extra_cflags=["-O3"],
                        no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.row_sum(x.contiguous())
