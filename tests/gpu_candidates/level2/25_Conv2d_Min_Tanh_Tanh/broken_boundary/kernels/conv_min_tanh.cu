// Fused Conv2d(3x3, stride 1, no padding) -> min over output channels -> tanh -> tanh.
//
// A block of 32 x 8 threads owns a 32 x 8 tile of output pixels of one image; each thread
// owns one pixel and keeps all kOutChannels accumulators in registers. Input channels are
// staged through shared memory kInChunk at a time: the (8 + 2) x (32 + 2) input patch of each
// channel, and the chunk's weights laid out [channel][tap][out_channel] so that one float4
// shared load (the same address for the whole warp, a broadcast) feeds four FMAs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kOutChannels = 64;
constexpr int kKernel = 3;
constexpr int kTaps = kKernel * kKernel;
constexpr int kInChunk = 4;
constexpr int kTileW = 32;
constexpr int kTileH = 8;
constexpr int kPatchW = kTileW + kKernel - 1;
constexpr int kPatchH = kTileH + kKernel - 1;
constexpr int kThreads = kTileW * kTileH;

__global__ void __launch_bounds__(kThreads) conv_min_tanh_kernel(const float* __restrict__ x,
                                                                 const float* __restrict__ weight,
                                                                 const float* __restrict__ bias,
                                                                 float* __restrict__ y, int in_channels, int height,
                                                                 int width, int out_height, int out_width) {
  __shared__ float patch[kInChunk][kPatchH][kPatchW];
  __shared__ __align__(16) float taps[kInChunk][kTaps][kOutChannels];

  const int tx = threadIdx.x % kTileW;
  const int ty = threadIdx.x / kTileW;
  const int ox0 = blockIdx.x * kTileW;
  const int oy0 = blockIdx.y * kTileH;
  const int64_t image = blockIdx.z;
  const float* image_in = x + image * in_channels * height * width;

  float acc[kOutChannels];
#pragma unroll
  for (int oc = 0; oc < kOutChannels; ++oc) acc[oc] = bias[oc];

  for (int c0 = 0; c0 < in_channels; c0 += kInChunk) {
    __syncthreads();  // the previous chunk is no longer read
    for (int i = threadIdx.x; i < kInChunk * kPatchH * kPatchW; i += kThreads) {
      const int c = i / (kPatchH * kPatchW);
      const int r = (i / kPatchW) % kPatchH;
      const int col = i % kPatchW;
      const int iy = oy0 + r;
      const int ix = ox0 + col;
      float v = 0.f;
      if (c0 + c < in_channels && iy < height && ix < width)
        v = image_in[(static_cast<int64_t>(c0 + c) * height + iy) * width + ix];
      patch[c][r][col] = v;
    }
    for (int i = threadIdx.x; i < kInChunk * kTaps * kOutChannels; i += kThreads) {
      const int c = i / (kTaps * kOutChannels);
      const int tap = (i / kOutChannels) % kTaps;
      const int oc = i % kOutChannels;
      taps[c][tap][oc] = c0 + c < in_channels ? weight[(oc * in_channels + c0 + c) * kTaps + tap] : 0.f;
    }
    __syncthreads();

#pragma unroll
    for (int c = 0; c < kInChunk; ++c) {
#pragma unroll
      for (int tap = 0; tap < kTaps; ++tap) {
        const float v = patch[c][ty + tap / kKernel][tx + tap % kKernel];
        const float4* w4 = reinterpret_cast<const float4*>(taps[c][tap]);
#pragma unroll
        for (int q = 0; q < kOutChannels / 4; ++q) {
          const float4 w = w4[q];
          acc[4 * q + 0] = fmaf(v, w.x, acc[4 * q + 0]);
          acc[4 * q + 1] = fmaf(v, w.y, acc[4 * q + 1]);
          acc[4 * q + 2] = fmaf(v, w.z, acc[4 * q + 2]);
          acc[4 * q + 3] = fmaf(v, w.w, acc[4 * q + 3]);
        }
      }
    }
  }

  const int oy = oy0 + ty;
  const int ox = ox0 + tx;
  float smallest = acc[0];
#pragma unroll
  for (int oc = 1; oc < kOutChannels; ++oc) smallest = fminf(smallest, acc[oc]);
  y[(image * out_height + oy) * out_width + ox] = tanhf(tanhf(smallest));
}

}  // namespace

bool conv_min_tanh_supports(int out_channels, int kernel_h, int kernel_w) {
  return out_channels == kOutChannels && kernel_h == kKernel && kernel_w == kKernel;
}

cudaError_t launch_conv_min_tanh(const float* x, const float* weight, const float* bias, float* y, int batch,
                                 int in_channels, int height, int width, cudaStream_t stream) {
  const int out_height = height - kKernel + 1;
  const int out_width = width - kKernel + 1;
  const dim3 grid((out_width + kTileW - 1) / kTileW, (out_height + kTileH - 1) / kTileH, batch);
  conv_min_tanh_kernel<<<grid, kThreads, 0, stream>>>(x, weight, bias, y, in_channels, height, width, out_height,
                                                      out_width);
  return cudaGetLastError();
}
