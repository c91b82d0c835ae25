// MaxPool1d over the last dimension of a contiguous (rows, length) float32 tensor.
// Thread i computes output (row, o) with o = i % out_length: the maximum of
// x[row, o * stride - padding + t * dilation] for t in [0, kernel_size), skipping positions
// in the padding. Neighbouring threads read overlapping windows, which L1 serves.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) max_pool1d_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                              int64_t total, int64_t length, int64_t out_length,
                                                              int kernel_size, int stride, int padding, int dilation) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t row = i / out_length;
  const int64_t o = i - row * out_length;
  const float* row_in = x + row * length;
  const int64_t start = o * stride - padding;
  float best = -INFINITY;
  for (int t = 0; t < kernel_size; ++t) {
    const int64_t position = start + static_cast<int64_t>(t) * dilation;
    if (position < 0 || position >= length) continue;
    const float v = row_in[position];
    if (v > best || isnan(v)) best = v;  // NaN wins, as in torch
  }
  y[i] = best;
}

}  // namespace

int64_t max_pool1d_output_length(int64_t length, int kernel_size, int stride, int padding, int dilation) {
  return (length + 2 * padding - static_cast<int64_t>(dilation) * (kernel_size - 1) - 1) / stride + 1;
}

cudaError_t launch_max_pool1d(const float* x, float* y, int64_t rows, int64_t length, int64_t out_length,
                              int kernel_size, int stride, int padding, int dilation, cudaStream_t stream) {
  const int64_t total = rows * out_length;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  max_pool1d_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, total, length, out_length,
                                                                           kernel_size, stride, padding, dilation);
  return cudaGetLastError();
}
