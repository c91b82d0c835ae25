#include <cuda_runtime.h>

#include <cstdint>

namespace {
__global__ void scale_kernel(const float* x, float factor, float* y, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = x[i] * factor;
}
__global__ void dequantize_kernel(const int64_t* q, float levels, float* y, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = static_cast<float>(q[i]) / levels;
}
}  // namespace

cudaError_t launch_scale(const float* x, float factor, float* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  scale_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(x, factor, y, count);
  return cudaGetLastError();
}

cudaError_t launch_dequantize(const int64_t* q, float levels, float* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  dequantize_kernel<<<static_cast<unsigned>((count + 255) / 256), 256, 0, stream>>>(q, levels, y, count);
  return cudaGetLastError();
}
