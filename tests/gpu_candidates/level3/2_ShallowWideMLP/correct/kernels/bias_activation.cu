// Epilogue on a row-major (rows, cols) layer output, in place: y = y + bias[col], then ReLU
// when `relu` is set. float4 at a time; cols % 4 == 0 is checked by the caller.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

template <bool kRelu>
__device__ __forceinline__ float activate(float v) {
  if constexpr (kRelu) return v < 0.f ? 0.f : v;
  return v;
}

template <bool kRelu>
__global__ void __launch_bounds__(kThreads) bias_activation_kernel(float4* __restrict__ y,
                                                                   const float4* __restrict__ bias,
                                                                   int64_t vectors_per_row, int64_t total_vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_vectors; i += stride) {
    const float4 b = bias[i % vectors_per_row];
    float4 v = y[i];
    v.x = activate<kRelu>(v.x + b.x);
    v.y = activate<kRelu>(v.y + b.y);
    v.z = activate<kRelu>(v.z + b.z);
    v.w = activate<kRelu>(v.w + b.w);
    y[i] = v;
  }
}

}  // namespace

cudaError_t launch_bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, bool relu,
                                   cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;
  const int64_t vectors_per_row = cols / 4;
  const int64_t total_vectors = rows * vectors_per_row;
  const int64_t wanted = (total_vectors + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < sm_count * 16LL ? wanted : sm_count * 16LL);
  float4* y4 = reinterpret_cast<float4*>(y);
  const float4* bias4 = reinterpret_cast<const float4*>(bias);
  if (relu)
    bias_activation_kernel<true><<<blocks, kThreads, 0, stream>>>(y4, bias4, vectors_per_row, total_vectors);
  else
    bias_activation_kernel<false><<<blocks, kThreads, 0, stream>>>(y4, bias4, vectors_per_row, total_vectors);
  return cudaGetLastError();
}
