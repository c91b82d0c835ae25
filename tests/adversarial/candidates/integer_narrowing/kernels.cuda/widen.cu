#include <cuda_runtime.h>

#include <cstdint>

namespace {
__global__ void widen_kernel(const uint8_t* in, int64_t* out, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = static_cast<int64_t>(in[i]);
}
}  // namespace

cudaError_t launch_widen(const uint8_t* in, int64_t* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int64_t wanted = (count + 255) / 256;
  widen_kernel<<<static_cast<unsigned>(wanted < 4096 ? wanted : 4096), 256, 0, stream>>>(in, out, count);
  return cudaGetLastError();
}
