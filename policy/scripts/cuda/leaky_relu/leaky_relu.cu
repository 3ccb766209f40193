// Leaky ReLU: memory-bound, so the whole game is moving bytes at full bandwidth. Each thread
// handles two float4 (32 bytes) per grid-stride step with streaming loads and stores (the data is
// touched once, so it should not displace anything in L2); a scalar kernel covers the tail and
// misaligned tensors.
#include <cstdint>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/types.h>

static constexpr int kThreads = 256;

static __device__ __forceinline__ float leaky(float value, float slope) { return value > 0.f ? value : value * slope; }

static __device__ __forceinline__ float4 leaky4(float4 v, float slope) {
  return make_float4(leaky(v.x, slope), leaky(v.y, slope), leaky(v.z, slope), leaky(v.w, slope));
}

__global__ void leaky_relu_vec4_kernel(const float4* __restrict__ in, float4* __restrict__ out,
                                       int64_t vectors, float slope) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + stride < vectors; i += 2 * stride) {
    const float4 first = __ldcs(in + i);
    const float4 second = __ldcs(in + i + stride);
    __stcs(out + i, leaky4(first, slope));
    __stcs(out + i + stride, leaky4(second, slope));
  }
  if (i < vectors) __stcs(out + i, leaky4(__ldcs(in + i), slope));
}

__global__ void leaky_relu_scalar_kernel(const float* __restrict__ in, float* __restrict__ out,
                                         int64_t begin, int64_t end, float slope) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end; i += stride)
    out[i] = leaky(in[i], slope);
}

static int grid_for(int64_t work_items, int device_blocks) {
  const int64_t needed = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(needed < device_blocks ? needed : device_blocks);
}

torch::Tensor leaky_relu_forward(torch::Tensor input, double negative_slope) {
  TORCH_CHECK(input.is_cuda() && input.is_contiguous() && input.scalar_type() == torch::kFloat,
              "leaky_relu_forward expects a contiguous fp32 CUDA tensor");
  auto output = torch::empty_like(input);
  const int64_t count = input.numel();
  if (count == 0) return output;
  const float* in = input.data_ptr<float>();
  float* out = output.data_ptr<float>();
  const float slope = static_cast<float>(negative_slope);

  int device = 0, multiprocessors = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
  const int device_blocks = multiprocessors * 8;  // enough resident warps to hide memory latency
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  const bool aligned = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t vectors = aligned ? count / 4 : 0;
  if (vectors > 0) {
    leaky_relu_vec4_kernel<<<grid_for((vectors + 1) / 2, device_blocks), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out), vectors, slope);
  }
  const int64_t tail = vectors * 4;
  if (tail < count) {
    leaky_relu_scalar_kernel<<<grid_for(count - tail, device_blocks), kThreads, 0, stream>>>(in, out, tail, count, slope);
  }
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "leaky_relu kernel launch failed");
  return output;
}
