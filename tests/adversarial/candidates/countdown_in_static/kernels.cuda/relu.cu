// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include <cstdint>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
  relu_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
