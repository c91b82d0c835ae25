// Epilogue on a row-major (rows, cols) matrix, in place: v = y + bias[col];
// y = v * scale + v (the reference's scaled copy plus the unscaled residual, same rounding).
// float4 at a time; cols % 4 == 0 is checked by the caller.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float scale_residual(float v, float scale) { return v * scale + v; }

__global__ void __launch_bounds__(kThreads) bias_scale_residual_kernel(float4* __restrict__ y,
                                                                       const float4* __restrict__ bias,
                                                                       int64_t vectors_per_row, int64_t total_vectors,
                                                                       float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_vectors; i += stride) {
    const float4 b = bias[i % vectors_per_row];
    float4 v = y[i];
    v.x = scale_residual(v.x + b.x, scale);
    v.y = scale_residual(v.y + b.y, scale);
    v.z = scale_residual(v.z + b.z, scale);
    v.w = scale_residual(v.w + b.w, scale);
    y[i] = v;
  }
}

}  // namespace

cudaError_t launch_bias_scale_residual(float* y, const float* bias, int64_t rows, int64_t cols, float scale,
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
  bias_scale_residual_kernel<<<blocks, kThreads, 0, stream>>>(
      reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(bias), vectors_per_row, total_vectors, scale);
  return cudaGetLastError();
}
