// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include <cstdint>

__global__ void relu_kernel(const float* x, float* y, int64_t begin, int64_t end) {
  const int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < end) y[i] = x[i] < 0.f ? 0.f : x[i];
}

void relu_range(const float* x, float* y, int64_t begin, int64_t end, cudaStream_t stream) {
  if (end <= begin) return;
  relu_kernel<<<static_cast<unsigned>((end - begin + 255) / 256), 256, 0, stream>>>(x, y, begin, end);
}
