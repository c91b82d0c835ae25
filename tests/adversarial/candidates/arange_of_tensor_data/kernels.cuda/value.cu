#include <cuda_runtime.h>

namespace {
__global__ void set_value_kernel(float* out, float value) { *out = value; }
}  // namespace

cudaError_t launch_set_value(float* out, float value, cudaStream_t stream) {
  set_value_kernel<<<1, 1, 0, stream>>>(out, value);
  return cudaGetLastError();
}
