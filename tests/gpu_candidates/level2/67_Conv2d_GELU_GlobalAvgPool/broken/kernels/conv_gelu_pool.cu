// Fused Conv2d(3x3, stride 1, no padding) + bias -> exact GELU -> mean over all pixels.
//
// conv_gelu_partial_sums: grid (kBlocksPerImage, batch). Each block walks the 32 x 8 output
//   tiles t = blockIdx.x, blockIdx.x + kBlocksPerImage, ... of its image. A thread owns one
//   pixel of the tile and keeps all kOutChannels accumulators in registers; input channels
//   are staged through shared memory kInChunk at a time, with the weights laid out
//   [channel][tap][out_channel] so that one broadcast float4 load feeds four FMAs. After each
//   tile every warp adds GELU(conv) of its valid pixels per channel (shuffle tree) into its
//   own row of warp_sums. At the end the block writes its per-channel sums.
// conv_gelu_finalize: out[n, c] = sum over the image's blocks (fixed order) / pixel count.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kOutChannels = 64;
constexpr int kKernel = 3;
constexpr int kTaps = kKernel * kKernel;
constexpr int kInChunk = 8;
constexpr int kTileW = 32;
constexpr int kTileH = 8;
constexpr int kPatchW = kTileW + kKernel - 1;
constexpr int kPatchH = kTileH + kKernel - 1;
constexpr int kThreads = kTileW * kTileH;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kBlocksPerImage = 8;

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

__global__ void __launch_bounds__(kThreads) conv_gelu_partial_sums(const float* __restrict__ x,
                                                                   const float* __restrict__ weight,
                                                                   const float* __restrict__ bias,
                                                                   float* __restrict__ partials, int in_channels,
                                                                   int height, int width, int out_height,
                                                                   int out_width) {
  __shared__ float patch[kInChunk][kPatchH][kPatchW];
  __shared__ __align__(16) float taps[kInChunk][kTaps][kOutChannels];
  __shared__ float warp_sums[kWarps][kOutChannels];

  const int tx = threadIdx.x % kTileW;
  const int ty = threadIdx.x / kTileW;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t image = blockIdx.y;
  const float* image_in = x + image * in_channels * height * width;
  const int tiles_x = (out_width + kTileW - 1) / kTileW;
  const int tiles = tiles_x * ((out_height + kTileH - 1) / kTileH);

  for (int i = threadIdx.x; i < kWarps * kOutChannels; i += kThreads) (&warp_sums[0][0])[i] = 0.f;

  for (int tile = blockIdx.x; tile < tiles; tile += kBlocksPerImage) {
    const int ox0 = (tile % tiles_x) * kTileW;
    const int oy0 = (tile / tiles_x) * kTileH;
    float acc[kOutChannels];
#pragma unroll
    for (int oc = 0; oc < kOutChannels; ++oc) acc[oc] = bias[oc];

    for (int c0 = 0; c0 < in_channels; c0 += kInChunk) {
      __syncthreads();  // the previous chunk (or tile) is no longer read
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

    const bool valid = oy0 + ty < out_height && ox0 + tx < out_width;
#pragma unroll
    for (int oc = 0; oc < kOutChannels; ++oc) {
      float v = valid ? gelu(acc[oc]) : 0.f;
      for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) warp_sums[warp][oc] += v;  // each warp owns its row: no race
    }
  }
  __syncthreads();
  if (threadIdx.x < kOutChannels) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += warp_sums[w][threadIdx.x];
    partials[(image * kBlocksPerImage + blockIdx.x) * kOutChannels + threadIdx.x] = sum;
  }
}

__global__ void conv_gelu_finalize(const float* __restrict__ partials, int64_t batch, float inverse_pixels,
                                   float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * kOutChannels) return;
  const int64_t image = i / kOutChannels;
  const int channel = static_cast<int>(i % kOutChannels);
  float sum = 0.f;
  for (int b = 0; b < kBlocksPerImage - 1; ++b) sum += partials[(image * kBlocksPerImage + b) * kOutChannels + channel];
  out[i] = sum * inverse_pixels;
}

}  // namespace

bool conv_gelu_pool_supports(int out_channels, int kernel_h, int kernel_w) {
  return out_channels == kOutChannels && kernel_h == kKernel && kernel_w == kKernel;
}

int64_t conv_gelu_pool_partial_count(int64_t batch) { return batch * kBlocksPerImage * kOutChannels; }

cudaError_t launch_conv_gelu_pool(const float* x, const float* weight, const float* bias, float* partials, float* out,
                                  int batch, int in_channels, int height, int width, cudaStream_t stream) {
  const int out_height = height - kKernel + 1;
  const int out_width = width - kKernel + 1;
  conv_gelu_partial_sums<<<dim3(kBlocksPerImage, batch), kThreads, 0, stream>>>(x, weight, bias, partials, in_channels,
                                                                               height, width, out_height, out_width);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  const int64_t outputs = static_cast<int64_t>(batch) * kOutChannels;
  const float inverse_pixels = 1.f / (static_cast<float>(out_height) * static_cast<float>(out_width));
  conv_gelu_finalize<<<static_cast<unsigned>((outputs + 255) / 256), 256, 0, stream>>>(partials, batch, inverse_pixels,
                                                                                     out);
  return cudaGetLastError();
}
