// LayerNorm over the last dimension (cols % 128 == 0, at most kMaxPerLane * 32 columns):
// one warp per row, the row held in registers (float4 per lane and step), two passes over
// the registers for the mean and the variance of (x - mean), then the affine transform.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kMaxVectorsPerLane = 8;  // up to 1024 columns

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kThreads) layer_norm_rows_kernel(const float4* __restrict__ x,
                                                                   const float4* __restrict__ weight,
                                                                   const float4* __restrict__ bias, int64_t rows,
                                                                   int vectors_per_row, float eps,
                                                                   float4* __restrict__ y) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (row >= rows) return;  // row is uniform across the warp
  const float4* in = x + row * vectors_per_row;
  float4 v[kMaxVectorsPerLane];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxVectorsPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    v[k] = i < vectors_per_row ? in[i] : float4{0.f, 0.f, 0.f, 0.f};
    sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  const float count = static_cast<float>(vectors_per_row) * 4.f;
  const float mean = warp_sum(sum) / count;
  float square = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxVectorsPerLane; ++k) {
    if (lane + k * kWarpSize >= vectors_per_row) continue;
    const float a = v[k].x - mean, b = v[k].y - mean, c = v[k].z - mean, d = v[k].w - mean;
    square += (a * a + b * b) + (c * c + d * d);
  }
  const float rstd = rsqrtf(warp_sum(square) / count + eps);
  float4* out = y + row * vectors_per_row;
#pragma unroll
  for (int k = 0; k < kMaxVectorsPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    if (i >= vectors_per_row) continue;
    const float4 w = weight[i];
    const float4 b = bias[i];
    out[i] = {(v[k].x - mean) * rstd * w.x + b.x, (v[k].y - mean) * rstd * w.y + b.y,
              (v[k].z - mean) * rstd * w.z + b.z, (v[k].w - mean) * rstd * w.w + b.w};
  }
}

}  // namespace

bool layer_norm_rows_supports(int64_t cols) { return cols % 4 == 0 && cols / 4 <= kMaxVectorsPerLane * kWarpSize; }

cudaError_t launch_layer_norm_rows(const float* x, const float* weight, const float* bias, int64_t rows, int64_t cols,
                                   float eps, float* y, cudaStream_t stream) {
  constexpr int64_t rows_per_block = kThreads / kWarpSize;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  layer_norm_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(weight),
      reinterpret_cast<const float4*>(bias), rows, static_cast<int>(cols / 4), eps, reinterpret_cast<float4*>(y));
  return cudaGetLastError();
}
