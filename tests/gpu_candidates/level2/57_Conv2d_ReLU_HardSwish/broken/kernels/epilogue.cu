// Epilogue on the NCHW conv output, in place: v = y + bias[c]; v = relu(v);
// y = v * clamp((v + 3) / 6, 0, 1). Channel of flat index i: (i / (H * W)) % C.
// float4 at a time when H * W % 4 == 0 (a vector then never straddles two channels).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float relu_hardswish(float v) {
  v = v < 0.f ? 0.f : v;
  return v * fminf(fmaxf((v + 3.f) / 6.f, 0.f), 1.f);
}

template <bool kVectorized>
__global__ void __launch_bounds__(kThreads) bias_relu_hardswish_kernel(float* __restrict__ y,
                                                                       const float* __restrict__ bias, int64_t channels,
                                                                       int64_t plane, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVectorized) {
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total / 4; i += stride) {
      const float b = bias[(i * 4) % channels];
      float4 v = y4[i];
      v.x = relu_hardswish(v.x + b);
      v.y = relu_hardswish(v.y + b);
      v.z = relu_hardswish(v.z + b);
      v.w = relu_hardswish(v.w + b);
      y4[i] = v;
    }
  } else {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
      y[i] = relu_hardswish(y[i] + bias[(i / plane) % channels]);
  }
}

}  // namespace

cudaError_t launch_bias_relu_hardswish(float* y, const float* bias, int64_t batch, int64_t channels, int64_t plane,
                                       cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;
  const int64_t total = batch * channels * plane;
  const bool vectorized = plane % 4 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  const int64_t items = vectorized ? total / 4 : total;
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < sm_count * 16LL ? wanted : sm_count * 16LL);
  if (vectorized)
    bias_relu_hardswish_kernel<true><<<blocks, kThreads, 0, stream>>>(y, bias, channels, plane, total);
  else
    bias_relu_hardswish_kernel<false><<<blocks, kThreads, 0, stream>>>(y, bias, channels, plane, total);
  return cudaGetLastError();
}
