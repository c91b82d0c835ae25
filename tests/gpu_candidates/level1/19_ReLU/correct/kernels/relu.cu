// ReLU over a contiguous float32 tensor: float4 loads and stores in a grid-stride loop,
// plus a scalar pass for the last numel % 4 elements (or all of them when unaligned).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

// torch.relu keeps NaN; `v < 0 ? 0 : v` does too, where fmaxf(v, 0) would not.
__device__ __forceinline__ float relu(float v) { return v < 0.f ? 0.f : v; }

__global__ void relu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t num_vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_vectors; i += stride) {
    float4 v = x[i];
    v.x = relu(v.x);
    v.y = relu(v.y);
    v.z = relu(v.z);
    v.w = relu(v.w);
    y[i] = v;
  }
}

__global__ void relu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t begin, int64_t end) {
  const int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < end) y[i] = relu(x[i]);
}

}  // namespace

cudaError_t launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;

  const bool aligned = (reinterpret_cast<std::uintptr_t>(x) % 16 == 0) && (reinterpret_cast<std::uintptr_t>(y) % 16 == 0);
  const int64_t num_vectors = aligned ? n / 4 : 0;
  if (num_vectors > 0) {
    const int64_t wanted = (num_vectors + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(wanted < sm_count * 32LL ? wanted : sm_count * 32LL);
    relu_vec4_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y),
                                                     num_vectors);
    if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  const int64_t tail_begin = num_vectors * 4;
  if (tail_begin < n) {
    const int64_t blocks = (n - tail_begin + kThreads - 1) / kThreads;
    relu_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, tail_begin, n);
    if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  return cudaSuccess;
}
