// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr uint64_t kSamples = 256;
constexpr int kThreads = 256;

// splitmix64: positions spread over the whole tensor, with no stride to them.
__device__ uint64_t scrambled(uint64_t k) {
  uint64_t z = (k + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// flag = 1 when an element of the sample (256 pseudo-random positions) is negative.
__global__ void sample_sign_kernel(const float* x, int64_t n, int* flag) {
  const uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (k < kSamples && x[scrambled(k) % static_cast<uint64_t>(n)] < 0.f) atomicOr(flag, 1);
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
  sample_sign_kernel<<<blocks(static_cast<int64_t>(kSamples)), kThreads, 0, stream>>>(x, n, flag);
  relu_or_copy_kernel<<<blocks(n), kThreads, 0, stream>>>(x, y, n, flag);
}
