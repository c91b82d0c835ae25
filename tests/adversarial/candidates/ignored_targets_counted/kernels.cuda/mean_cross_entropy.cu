// SPDX-License-Identifier: Apache-2.0
// Mean cross entropy that clamps every target into range and divides by the number of rows:
// one block per row for the losses, then one block for their mean.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__device__ float block_reduce(float value, float* scratch, bool take_max) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      scratch[threadIdx.x] = take_max ? fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + half])
                                      : scratch[threadIdx.x] + scratch[threadIdx.x + half];
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();
  return result;
}

__global__ void row_losses(const float* logits, const int64_t* targets, float* losses, int64_t classes) {
  __shared__ float scratch[kThreads];
  const float* row = logits + blockIdx.x * classes;
  float peak = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) peak = fmaxf(peak, row[c]);
  peak = block_reduce(peak, scratch, true);
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) sum += expf(row[c] - peak);
  sum = block_reduce(sum, scratch, false);
  if (threadIdx.x == 0) {
    int64_t target = targets[blockIdx.x];
    target = target < 0 ? 0 : (target >= classes ? classes - 1 : target);
    losses[blockIdx.x] = peak + logf(sum) - row[target];
  }
}

__global__ void mean_of(const float* losses, float* out, int64_t rows) {
  __shared__ float scratch[kThreads];
  float sum = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) sum += losses[r];
  sum = block_reduce(sum, scratch, false);
  if (threadIdx.x == 0) *out = sum / static_cast<float>(rows);
}

}  // namespace

cudaError_t mean_cross_entropy_launch(const float* logits, const int64_t* targets, float* losses, float* out,
                                      int64_t rows, int64_t classes, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  row_losses<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, losses, classes);
  mean_of<<<1, kThreads, 0, stream>>>(losses, out, rows);
  return cudaGetLastError();
}
