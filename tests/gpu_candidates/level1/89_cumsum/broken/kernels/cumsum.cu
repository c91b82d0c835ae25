// Inclusive cumulative sum along the last dimension of a contiguous float32 tensor.
//
// One block of kThreads threads per row. The row is scanned in tiles of 4 * kThreads
// elements: each thread loads 4 consecutive elements (one float4 when the row allows it),
// scans them locally, the block scans the per-thread totals (warp shuffles, then one warp
// over the per-warp totals), and every thread adds the exclusive prefix of the threads
// before it plus the carry of the previous tiles.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 1024;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kPerThread = 4;
constexpr int kTile = kThreads * kPerThread;

__device__ __forceinline__ float warp_inclusive_scan(float value, int lane) {
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const float other = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value += other;
  }
  return value;
}

template <bool kVectorized>
__global__ void __launch_bounds__(kThreads) cumsum_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                               int64_t length) {
  __shared__ float warp_totals[kWarps];
  __shared__ float tile_total;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const float* row_in = x + static_cast<int64_t>(blockIdx.x) * length;
  float* row_out = y + static_cast<int64_t>(blockIdx.x) * length;
  float carry = 0.f;
  for (int64_t tile = 0; tile < length; tile += kTile) {
    const int64_t first = tile + static_cast<int64_t>(threadIdx.x) * kPerThread;
    float v[kPerThread];
    if (kVectorized && first + kPerThread <= length) {
      const float4 packed = *reinterpret_cast<const float4*>(row_in + first);
      v[0] = packed.x;
      v[1] = packed.y;
      v[2] = packed.z;
      v[3] = packed.w;
    } else {
      for (int e = 0; e < kPerThread; ++e) v[e] = first + e < length ? row_in[first + e] : 0.f;
    }
    for (int e = 1; e < kPerThread; ++e) v[e] += v[e - 1];

    const float thread_inclusive = warp_inclusive_scan(v[kPerThread - 1], lane);
    if (lane == kWarpSize - 1) warp_totals[warp] = thread_inclusive;
    __syncthreads();
    if (warp == 0) {
      const float warp_inclusive = warp_inclusive_scan(warp_totals[lane], lane);
      warp_totals[lane] = warp_inclusive;
      if (lane == kWarpSize - 1) tile_total = warp_inclusive;
    }
    __syncthreads();
    const float warp_offset = warp_totals[warp];
    const float offset = carry + warp_offset + (thread_inclusive - v[kPerThread - 1]);

    if (kVectorized && first + kPerThread <= length) {
      *reinterpret_cast<float4*>(row_out + first) = {v[0] + offset, v[1] + offset, v[2] + offset, v[3] + offset};
    } else {
      for (int e = 0; e < kPerThread; ++e)
        if (first + e < length) row_out[first + e] = v[e] + offset;
    }
    carry += tile_total;
    __syncthreads();  // warp_totals and tile_total are rewritten by the next tile
  }
}

}  // namespace

cudaError_t launch_cumsum_rows(const float* x, float* y, int64_t rows, int64_t length, cudaStream_t stream) {
  const bool vectorized = length % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  if (vectorized)
    cumsum_rows_kernel<true><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, y, length);
  else
    cumsum_rows_kernel<false><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, y, length);
  return cudaGetLastError();
}
