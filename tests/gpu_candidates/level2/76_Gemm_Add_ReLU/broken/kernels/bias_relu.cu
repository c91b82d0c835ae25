// Epilogue on a row-major (rows, cols) matrix, in place: y = relu(y + bias[col]).
// float4 at a time; cols % 4 == 0 is checked by the caller.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float relu(float v) { return v < 0.f ? 0.f : v; }

__global__ void __launch_bounds__(kThreads) bias_relu_kernel(float4* __restrict__ y, const float4* __restrict__ bias,
                                                             int64_t vectors_per_row, int64_t total_vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_vectors; i += stride) {
    const int64_t column = i / vectors_per_row;
    const float4 b = bias[column];
    float4 v = y[i];
    v.x = relu(v.x + b.x);
    v.y = relu(v.y + b.y);
    v.z = relu(v.z + b.z);
    v.w = relu(v.w + b.w);
    y[i] = v;
  }
}

}  // namespace

cudaError_t launch_bias_relu(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
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
  bias_relu_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(bias),
                                                    vectors_per_row, total_vectors);
  return cudaGetLastError();
}
