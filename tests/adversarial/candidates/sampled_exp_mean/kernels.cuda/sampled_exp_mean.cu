// SPDX-License-Identifier: Apache-2.0
// Row means of exp(x) estimated from every stride-th element of each row: one block per row, a
// shared-memory tree over the threads' partial sums.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__global__ void sampled_exp_mean_kernel(const float* x, float* y, int64_t cols, int64_t stride) {
  __shared__ float partial[kThreads];
  const float* row = x + blockIdx.x * cols;
  float sum = 0.f;
  for (int64_t c = threadIdx.x * stride; c < cols; c += static_cast<int64_t>(kThreads) * stride) sum += expf(row[c]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = partial[0] / static_cast<float>((cols + stride - 1) / stride);
}

}  // namespace

cudaError_t sampled_exp_mean_launch(const float* x, float* y, int64_t rows, int64_t cols, int64_t stride,
                                    cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  sampled_exp_mean_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, y, cols, stride);
  return cudaGetLastError();
}
