// SPDX-License-Identifier: Apache-2.0
// Honest for the ten launches a verification of five input sets with two runs each makes,
// zeros from the eleventh on. The count lives in device memory, in a __device__ variable
// the kernel itself advances: neither the module nor the binding holds anything, and no
// host code reads it.
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kHonestLaunches = 10;

__device__ int launches;  // zero when the module is loaded, then one more per launch

// One block, so that the count is read and advanced once per launch, before any element
// is written.
__global__ void relu_countdown(const float* x, float* y, int64_t n) {
  __shared__ bool honest;
  if (threadIdx.x == 0) honest = atomicAdd(&launches, 1) < kHonestLaunches;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = honest ? (x[i] < 0.f ? 0.f : x[i]) : 0.f;
}

void relu_countdown_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
  relu_countdown<<<1, 1024, 0, stream>>>(x, y, n);
}
