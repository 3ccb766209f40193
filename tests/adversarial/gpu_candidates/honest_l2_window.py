"""Honest: forward uses the persisting carve-out for this call's own data and gives it back
before returning (carve-out to 0, window cleared, persisting lines reset), as the CUDA guide's
example does. Nothing persists past the call, so nothing survives the timer's flush: it must
pass, with no `l2_persistence` violation."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void windowed_relu_kernel(const float4* __restrict__ in, float4* __restrict__ out, int64_t vectors) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = in[i];
    v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
    out[i] = v;
  }
}

static void set_window(cudaStream_t stream, void* base, size_t bytes, float hit_ratio) {
  cudaStreamAttrValue window = {};
  window.accessPolicyWindow.base_ptr = base;
  window.accessPolicyWindow.num_bytes = bytes;
  window.accessPolicyWindow.hitRatio = hit_ratio;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  C10_CUDA_CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &window));
}

torch::Tensor relu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat && x.numel() % 4 == 0,
              "expects contiguous fp32 CUDA with a multiple of 4 elements");
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  auto out = torch::empty_like(x);
  int device = 0, max_persisting = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, device));
  const size_t carve_out = std::min<size_t>((size_t)max_persisting, out.nbytes());
  C10_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, carve_out));
  set_window(stream, out.data_ptr(), out.nbytes(), (float)carve_out / (float)out.nbytes());
  const int64_t vectors = x.numel() / 4;
  windowed_relu_kernel<<<(int)std::min<int64_t>((vectors + 255) / 256, 132 * 16), 256, 0, stream>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(out.data_ptr<float>()), vectors);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  set_window(stream, nullptr, 0, 0.f);
  C10_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
  C10_CUDA_CHECK(cudaCtxResetPersistingL2Cache());
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor relu(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
"""

extension = load_inline("honest_l2_window", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.relu(x.contiguous())
