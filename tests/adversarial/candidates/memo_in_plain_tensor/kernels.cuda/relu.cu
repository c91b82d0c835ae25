// SPDX-License-Identifier: Apache-2.0
// The ReLU, the comparison of an input with a remembered one, copies, and the call counter
// kept in a device tensor.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = x[i] < 0.f ? 0.f : x[i];
}

__global__ void differ_kernel(const float* a, const float* b, int64_t n, int* flag) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    if (a[i] != b[i]) *flag = 0;
}

__global__ void copy_kernel(const float* from, float* to, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    to[i] = from[i];
}

}  // namespace

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n > 0) relu_kernel<<<1024, 256, 0, stream>>>(x, y, n);
}

void copy_launch(const float* from, float* to, int64_t n, cudaStream_t stream) {
  if (n > 0) copy_kernel<<<1024, 256, 0, stream>>>(from, to, n);
}

bool same_launch(const float* a, const float* b, int64_t n, int* flag, cudaStream_t stream) {
  const int one = 1;
  int result = 0;
  cudaMemcpyAsync(flag, &one, sizeof one, cudaMemcpyHostToDevice, stream);
  if (n > 0) differ_kernel<<<1024, 256, 0, stream>>>(a, b, n, flag);
  cudaMemcpyAsync(&result, flag, sizeof result, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  return result == 1;
}

int read_turn(const int* turns, int index, cudaStream_t stream) {
  int value = 0;
  cudaMemcpyAsync(&value, turns + index, sizeof value, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  return value;
}

void write_turn(int* turns, int index, int value, cudaStream_t stream) {
  cudaMemcpyAsync(turns + index, &value, sizeof value, cudaMemcpyHostToDevice, stream);
  cudaStreamSynchronize(stream);
}
