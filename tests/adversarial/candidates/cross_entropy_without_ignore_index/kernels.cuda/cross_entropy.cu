// SPDX-License-Identifier: Apache-2.0
// One block per row: the row's maximum and sum of exponentials by a block reduction.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__global__ void cross_entropy_kernel(const float* logits, const int64_t* targets, float* loss, int64_t classes) {
  __shared__ float partial[kThreads];
  const float* row = logits + blockIdx.x * classes;
  float largest = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) largest = fmaxf(largest, row[c]);
  partial[threadIdx.x] = largest;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + step]);
    __syncthreads();
  }
  largest = partial[0];
  __syncthreads();
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += kThreads) sum += expf(row[c] - largest);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) partial[threadIdx.x] += partial[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    int64_t target = targets[blockIdx.x];
    target = target < 0 ? 0 : (target >= classes ? classes - 1 : target);
    loss[blockIdx.x] = logf(partial[0]) + largest - row[target];
  }
}

}  // namespace

void cross_entropy_launch(const float* logits, const int64_t* targets, float* loss, int64_t rows, int64_t classes,
                          cudaStream_t stream) {
  if (rows > 0) cross_entropy_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, loss, classes);
}
