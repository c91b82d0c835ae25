// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include <cstdint>

__global__ void clamp_kernel(float* y, int64_t n, float low, float high) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = fminf(fmaxf(y[i], low), high);
}

void clamp_in_place(float* y, int64_t n, float low, float high, cudaStream_t stream) {
  clamp_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(y, n, low, high);
}
