"""Candidate sources for harness_throughput's measurement (README, Measured: "Harness throughput").

Candidate sources for experiments/harness_throughput.py: CUDA (and C++ for the CPU backend)
leaky-ReLU and row-sum kernels for the bundled problems, each variant with its own constants so
every candidate has a distinct source hash and really compiles; a few are wrong on purpose."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_PY = '''"""Generated for the harness throughput benchmark: {description}."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{cpp}"""
CUDA = r"""{cuda}"""

extension = load_inline("{name}", cpp_sources=[CPP], cuda_sources=[CUDA] if CUDA.strip() else None,
                        extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        self.init_inputs = init_inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.run(x.contiguous(), *self.init_inputs)
'''

_BINDING = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor run(torch::Tensor x{extra_params});
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("run", &run); }}
"""

_LEAKY_CUDA = r"""
#include <torch/types.h>
// variant {variant}: {block} threads, {items} items per thread
__global__ void leaky_{variant}(const float* __restrict__ in, float* __restrict__ out, long n, float slope) {{
  long first = ((long)blockIdx.x * {block} + threadIdx.x) * {items};
  #pragma unroll
  for (int k = 0; k < {items}; ++k) {{
    long i = first + k;
    if (i < n) {{ float v = in[i]; out[i] = v > 0.f ? v : v * {negative}; }}
  }}
}}
torch::Tensor run(torch::Tensor x, double negative_slope) {{
  auto out = torch::empty_like(x);
  long n = x.numel();
  const float slope = (float)negative_slope;
  long per_block = (long){block} * {items};
  leaky_{variant}<<<(unsigned)((n + per_block - 1) / per_block), {block}>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, slope);
  return out;
}}
"""

_ROWSUM_CUDA = r"""
#include <torch/types.h>
// variant {variant}: {block} threads per row, {items} loads per step
__global__ void rowsum_{variant}(const float* __restrict__ in, float* __restrict__ out, long cols) {{
  __shared__ float partial[{block}];
  const float* row = in + (long)blockIdx.x * cols;
  float acc = 0.f;
  for (long c = (long)threadIdx.x * {items}; c < cols; c += (long){block} * {items}) {{
    #pragma unroll
    for (int k = 0; k < {items}; ++k) if (c + k < cols) acc += row[c + k]{scale};
  }}
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = {block} / 2; stride > 0; stride >>= 1) {{
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }}
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}}
torch::Tensor run(torch::Tensor x) {{
  long rows = x.numel() / x.size(-1), cols = x.size(-1);
  auto out = torch::empty({{rows}}, x.options());
  rowsum_{variant}<<<(unsigned)rows, {block}>>>(x.data_ptr<float>(), out.data_ptr<float>(), cols);
  return out;
}}
"""

_LEAKY_CPP = r"""
torch::Tensor run(torch::Tensor x, double negative_slope) {{
  // variant {variant}: chunks of {block} x {items}
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* result = out.data_ptr<float>();
  const float slope = (float)negative_slope;
  const long n = x.numel();
  for (long start = 0; start < n; start += {block} * {items})
    for (long i = start; i < std::min(n, start + (long){block} * {items}); ++i)
      result[i] = in[i] > 0.f ? in[i] : in[i] * {negative};
  return out;
}}
"""

_ROWSUM_CPP = r"""
torch::Tensor run(torch::Tensor x) {{
  // variant {variant}: {items} accumulators, block {block}
  const long cols = x.size(-1), rows = x.numel() / cols;
  auto out = torch::empty({{rows}}, x.options());
  const float* in = x.data_ptr<float>();
  float* result = out.data_ptr<float>();
  for (long r = 0; r < rows; ++r) {{
    float acc[{items}] = {{0.f}};
    for (long c = 0; c < cols; ++c) acc[c % {items}] += in[r * cols + c]{scale};
    float total = 0.f;
    for (int k = 0; k < {items}; ++k) total += acc[k];
    result[r] = total;
  }}
  return out;
}}
"""


@dataclass(frozen=True)
class Variant:
    problem_stem: str  # the bundled problem it solves
    variant: int
    block: int
    items: int
    wrong: bool = False  # computes something else on purpose

    @property
    def file_name(self) -> str:
        return f"{self.problem_stem}_sample_{self.variant}.py"

    def source(self, device: str) -> str:
        name = f"throughput_{self.problem_stem}_{device}_{self.variant}"
        leaky = self.problem_stem == "leaky_relu"
        constants = {"variant": self.variant, "block": self.block, "items": self.items,
                     # wrong on purpose: halves negatives instead of applying the slope
                     "negative": "0.5f" if self.wrong else "slope",
                     # wrong on purpose: every element counted one and a half times
                     "scale": " * 1.5f" if self.wrong else ""}
        kernel = (_LEAKY_CUDA if leaky else _ROWSUM_CUDA) if device == "cuda" else (_LEAKY_CPP if leaky else _ROWSUM_CPP)
        body = kernel.format(**constants)
        binding = _BINDING.format(extra_params=", double negative_slope" if leaky else "")
        if device == "cuda":
            cpp, cuda = binding, body
        else:
            cpp, cuda = "#include <algorithm>\n" + binding.replace("PYBIND11", body + "\nPYBIND11"), ""
        description = f"{self.problem_stem} variant {self.variant}{' (wrong on purpose)' if self.wrong else ''}"
        return _PY.format(description=description, cpp=cpp, cuda=cuda, name=name)


def variants(count: int = 20) -> list[Variant]:
    """`count` variants alternating between the two problems; every tenth one is wrong."""
    shapes = [(block, items) for items in (1, 2, 4) for block in (128, 256, 512, 1024)]
    chosen = []
    for index in range(count):
        stem = "leaky_relu" if index % 2 == 0 else "row_sum"
        block, items = shapes[(index // 2) % len(shapes)]
        chosen.append(Variant(stem, index + 1, block, items, wrong=index % 10 == 9 or index % 10 == 4))
    return chosen


def write_candidates(directory: Path, device: str, count: int = 20) -> list[Variant]:
    directory.mkdir(parents=True, exist_ok=True)
    chosen = variants(count)
    for variant in chosen:
        (directory / variant.file_name).write_text(variant.source(device))
    return chosen
