// Fused valid Conv2d (stride 1) + bias -> ReLU -> MaxPool2d(2, 2) for LeNet's small layers.
//
// One thread per pooled output (n, c, py, px): it computes the four convolution outputs of
// its 2x2 window, takes their maximum and applies ReLU (max and ReLU commute). Neighbouring
// threads share input rows through L1; the weights of a channel are read by a whole warp at
// once (a broadcast). The output is contiguous NCHW, which for the second layer is also the
// row-major (batch, channels * pooled_h * pooled_w) matrix that x.view(-1, 400) gives.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

template <int kKernel>
__global__ void __launch_bounds__(kThreads) conv_relu_pool_kernel(const float* __restrict__ x,
                                                                  const float* __restrict__ weight,
                                                                  const float* __restrict__ bias,
                                                                  float* __restrict__ y, int64_t total,
                                                                  int in_channels, int height, int width,
                                                                  int out_channels, int pooled_h, int pooled_w) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int px = static_cast<int>(i % pooled_w);
  const int py = static_cast<int>((i / pooled_w) % pooled_h);
  const int c = static_cast<int>((i / (static_cast<int64_t>(pooled_w) * pooled_h)) % out_channels);
  const int64_t n = i / (static_cast<int64_t>(pooled_w) * pooled_h * out_channels);
  const float* image = x + n * in_channels * height * width;
  const float* filters = weight + static_cast<int64_t>(c) * in_channels * kKernel * kKernel;

  float best = -INFINITY;
  for (int dy = 0; dy < 2; ++dy) {
    for (int dx = 0; dx < 2; ++dx) {
      const int oy = 2 * py + dy;
      const int ox = 2 * px + dx;
      float acc = bias[c];
      for (int ic = 0; ic < in_channels; ++ic) {
        const float* plane = image + (static_cast<int64_t>(ic) * height + oy) * width + ox;
        const float* taps = filters + ic * kKernel * kKernel;
#pragma unroll
        for (int ky = 0; ky < kKernel; ++ky) {
#pragma unroll
          for (int kx = 0; kx < kKernel; ++kx) acc = fmaf(plane[ky * width + kx], taps[ky * kKernel + kx], acc);
        }
      }
      best = fmaxf(best, acc);
    }
  }
  y[i] = best < 0.f ? 0.f : best;
}

}  // namespace

bool conv_relu_pool_supports(int kernel_size) { return kernel_size == 5; }

cudaError_t launch_conv_relu_pool(const float* x, const float* weight, const float* bias, float* y, int batch,
                                  int in_channels, int height, int width, int out_channels, cudaStream_t stream) {
  constexpr int kKernel = 5;
  const int pooled_h = (height - kKernel + 1) / 2;
  const int pooled_w = (width - kKernel + 1) / 2;
  const int64_t total = static_cast<int64_t>(batch) * out_channels * pooled_h * pooled_w;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  conv_relu_pool_kernel<kKernel><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, weight, bias, y, total, in_channels, height, width, out_channels, pooled_h, pooled_w);
  return cudaGetLastError();
}
