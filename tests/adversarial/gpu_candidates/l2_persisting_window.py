"""Persisting L2 (HACKS.md B): forward sets the persisting-L2 carve-out to the device's maximum
and an access-policy window (hitProp=Persisting, hitRatio 1) over its input on the current
stream, and leaves both set. The timer's flush is a write and does not evict persisting lines,
and the next input is refilled on the same stream inside the window, so without the harness's
reset the input would be read from L2. Rejected with `l2_persistence`."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void persisting_relu_kernel(const float4* __restrict__ in, float4* __restrict__ out, int64_t vectors) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += (int64_t)gridDim.x * blockDim.x) {
    float4 v = in[i];
    v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
    out[i] = v;
  }
}

torch::Tensor relu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat && x.numel() % 4 == 0,
              "expects contiguous fp32 CUDA with a multiple of 4 elements");
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  int device = 0, max_persisting = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, device));
  C10_CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, max_persisting));
  cudaStreamAttrValue window = {};
  window.accessPolicyWindow.base_ptr = x.data_ptr();
  window.accessPolicyWindow.num_bytes = x.nbytes();
  window.accessPolicyWindow.hitRatio = 1.0f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  C10_CUDA_CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &window));
  auto out = torch::empty_like(x);
  const int64_t vectors = x.numel() / 4;
  persisting_relu_kernel<<<(int)std::min<int64_t>((vectors + 255) / 256, 132 * 16), 256, 0, stream>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(out.data_ptr<float>()), vectors);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
torch::Tensor relu(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
"""

extension = load_inline("adversarial_l2_persisting_window", cpp_sources=[CPP_SOURCE], cuda_sources=[CUDA_SOURCE],
                        extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.relu(x.contiguous())
