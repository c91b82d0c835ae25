// SPDX-License-Identifier: Apache-2.0
// CUDA kernels shared by the adversarial suite's candidates: correct implementations of the
// suite's tasks and the deliberate defects the exploits are made of. One build serves
// every candidate (the compile driver's object cache keys objects by content).
#include "toolbox.cuh"

#include <cuda_fp16.h>

namespace toolbox {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void matmul_kernel(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, bool half) {
  const int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  const int64_t column = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= m || column >= n) return;
  float sum = 0.f;
  for (int64_t p = 0; p < k; ++p) {
    float left = a[row * k + p];
    float right = b[p * n + column];
    if (half) {
      left = __half2float(__float2half(left));
      right = __half2float(__float2half(right));
    }
    sum += left * right;
  }
  c[row * n + column] = sum;
}

template <int Tile>
__global__ void matmul_tiled_kernel(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  __shared__ float left[Tile][Tile];
  __shared__ float right[Tile][Tile];
  const int64_t row = blockIdx.y * static_cast<int64_t>(Tile) + threadIdx.y;
  const int64_t column = blockIdx.x * static_cast<int64_t>(Tile) + threadIdx.x;
  float sum = 0.f;
  for (int64_t base = 0; base < k; base += Tile) {
    left[threadIdx.y][threadIdx.x] = row < m && base + threadIdx.x < k ? a[row * k + base + threadIdx.x] : 0.f;
    right[threadIdx.y][threadIdx.x] = column < n && base + threadIdx.y < k ? b[(base + threadIdx.y) * n + column] : 0.f;
    __syncthreads();
    for (int p = 0; p < Tile; ++p) sum += left[threadIdx.y][p] * right[p][threadIdx.x];
    __syncthreads();
  }
  if (row < m && column < n) c[row * n + column] = sum;
}

__global__ void matmul_fixed_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= fixed_m || column >= fixed_n) return;
  float sum = 0.f;
#pragma unroll 8
  for (int p = 0; p < fixed_k; ++p) sum += a[row * fixed_k + p] * b[p * fixed_n + column];
  c[row * fixed_n + column] = sum;
}

__global__ void relu_kernel(const float* x, float* y, int64_t begin, int64_t end) {
  const int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < end) y[i] = x[i] < 0.f ? 0.f : x[i];
}

__global__ void add_at_kernel(float* y, int64_t index, float value, bool set) {
  if (set)
    y[index] = value;
  else
    y[index] += value;
}

__global__ void copy_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i];
}

__global__ void clamp_kernel(const float* x, float* y, int64_t n, float low, float high) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = fminf(fmaxf(x[i], low), high);
}

__global__ void fill_kernel(float* y, int64_t n, float value) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = value;
}

// y[r, o] = b[o] + sum_p x[r, p] w[o, p]; w as nn.Linear stores it (out x in).
__global__ void linear_kernel(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in,
                              int64_t out, bool half) {
  const int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows || o >= out) return;
  float sum = 0.f;
  for (int64_t p = 0; p < in; ++p) {
    if (half)
      sum += __half2float(__float2half(x[r * in + p])) * __half2float(__float2half(w[o * in + p]));
    else
      sum += x[r * in + p] * w[o * in + p];
  }
  y[r * out + o] = sum + b[o];
}

__global__ void transpose_kernel(const float* w, float* t, int64_t rows, int64_t cols) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  t[c * rows + r] = w[i];
}

// y[r, o] = b[o] + sum_p x[r, p] wt[p, o].
__global__ void linear_packed_kernel(const float* x, const float* wt, const float* b, float* y, int64_t rows,
                                     int64_t in, int64_t out) {
  const int64_t r = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows || o >= out) return;
  float sum = b[o];
  for (int64_t p = 0; p < in; ++p) sum += x[r * in + p] * wt[p * out + o];
  y[r * out + o] = sum;
}

__global__ void row_sum_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float sum = 0.f;
  for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c];
  y[r] = sum;
}

// Each block reduces a slice of a row in shared memory and adds it with atomicAdd: the
// order of the additions changes from run to run.
__global__ void row_sum_atomic_kernel(const float* x, float* y, int64_t cols) {
  __shared__ float partial[kThreads];
  const int64_t row = blockIdx.y;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  partial[threadIdx.x] = c < cols ? x[row * cols + c] : 0.f;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(&y[row], partial[0]);
}

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

cudaError_t launched() { return cudaGetLastError(); }

}  // namespace

cudaError_t matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t stream) {
  const dim3 threads(16, 16);
  const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((m + 15) / 16));
  matmul_kernel<<<grid, threads, 0, stream>>>(a, b, c, m, k, n, false);
  return launched();
}

cudaError_t matmul_half_inputs(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n,
                               cudaStream_t stream) {
  const dim3 threads(16, 16);
  const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((m + 15) / 16));
  matmul_kernel<<<grid, threads, 0, stream>>>(a, b, c, m, k, n, true);
  return launched();
}

cudaError_t matmul_tiled(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t stream) {
  const dim3 threads(32, 32);
  const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>((m + 31) / 32));
  matmul_tiled_kernel<32><<<grid, threads, 0, stream>>>(a, b, c, m, k, n);
  return launched();
}

cudaError_t matmul_fixed(const float* a, const float* b, float* c, cudaStream_t stream) {
  const dim3 threads(32, 8);
  const dim3 grid(static_cast<unsigned>(fixed_n / 32), static_cast<unsigned>(fixed_m / 8));
  matmul_fixed_kernel<<<grid, threads, 0, stream>>>(a, b, c);
  return launched();
}

cudaError_t relu(const float* x, float* y, int64_t n, cudaStream_t stream) { return relu_range(x, y, 0, n, stream); }

cudaError_t relu_range(const float* x, float* y, int64_t begin, int64_t end, cudaStream_t stream) {
  if (end <= begin) return cudaSuccess;
  relu_kernel<<<blocks_for(end - begin), kThreads, 0, stream>>>(x, y, begin, end);
  return launched();
}

cudaError_t add_at(float* y, int64_t index, float value, cudaStream_t stream) {
  add_at_kernel<<<1, 1, 0, stream>>>(y, index, value, false);
  return launched();
}

cudaError_t set_at(float* y, int64_t index, float value, cudaStream_t stream) {
  add_at_kernel<<<1, 1, 0, stream>>>(y, index, value, true);
  return launched();
}

cudaError_t copy(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  return launched();
}

cudaError_t clamp(const float* x, float* y, int64_t n, float low, float high, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  clamp_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, low, high);
  return launched();
}

cudaError_t fill(float* y, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, n, value);
  return launched();
}

cudaError_t linear(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in, int64_t out,
                   bool half_operands, cudaStream_t stream) {
  const dim3 threads(32, 8);
  const dim3 grid(static_cast<unsigned>((out + 31) / 32), static_cast<unsigned>((rows + 7) / 8));
  linear_kernel<<<grid, threads, 0, stream>>>(x, w, b, y, rows, in, out, half_operands);
  return launched();
}

cudaError_t transpose(const float* w, float* t, int64_t rows, int64_t cols, cudaStream_t stream) {
  transpose_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(w, t, rows, cols);
  return launched();
}

cudaError_t linear_packed(const float* x, const float* wt, const float* b, float* y, int64_t rows, int64_t in,
                          int64_t out, cudaStream_t stream) {
  const dim3 threads(32, 8);
  const dim3 grid(static_cast<unsigned>((out + 31) / 32), static_cast<unsigned>((rows + 7) / 8));
  linear_packed_kernel<<<grid, threads, 0, stream>>>(x, wt, b, y, rows, in, out);
  return launched();
}

cudaError_t row_sum(const float* x, float* y, int64_t rows, int64_t cols, bool atomic, cudaStream_t stream) {
  if (!atomic) {
    row_sum_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(x, y, rows, cols);
    return launched();
  }
  if (cudaError_t status = fill(y, rows, 0.f, stream); status != cudaSuccess) return status;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  row_sum_atomic_kernel<<<grid, kThreads, 0, stream>>>(x, y, cols);
  return launched();
}

cudaError_t spin(cudaStream_t stream, long long cycles) {
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  return launched();
}

}  // namespace toolbox
