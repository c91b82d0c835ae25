// Log-softmax over the last dimension of a contiguous float32 tensor.
// One block per row. Pass 1: each thread folds its elements into an online (max, sum of
// exp(x - max)) pair; the block combines the pairs with butterfly shuffles. Pass 2 writes
// x - (max + log(sum)). The row is read twice and written once.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 1024;
constexpr int kWarpSize = 32;

struct MaxSum {
  float max;
  float sum;  // sum of exp(x - max) over the elements seen
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.f};  // both sides empty
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

__device__ __forceinline__ MaxSum fold(MaxSum acc, float value) {
  if (value > acc.max) {
    acc.sum = acc.sum * expf(acc.max - value) + 1.f;
    acc.max = value;
  } else {
    acc.sum += expf(value - acc.max);
  }
  return acc;
}

// After the loop every lane holds the combination of all 32 lanes.
__device__ __forceinline__ MaxSum warp_combine(MaxSum value) {
  for (int offset = kWarpSize / 2; offset > 1; offset /= 2) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, value.max, offset),
                       __shfl_xor_sync(0xffffffffu, value.sum, offset)};
    value = combine(value, other);
  }
  return value;
}

__device__ MaxSum block_combine(MaxSum value) {
  __shared__ MaxSum per_warp[kWarpSize];
  __shared__ MaxSum result;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = warp_combine(value);
  if (lane == 0) per_warp[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < num_warps ? per_warp[lane] : MaxSum{-INFINITY, 0.f};
    value = warp_combine(value);
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

template <bool kVectorized>
__global__ void __launch_bounds__(kThreads) log_softmax_rows_kernel(const float* __restrict__ x,
                                                                     float* __restrict__ y, int64_t cols) {
  const float* row_in = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* row_out = y + static_cast<int64_t>(blockIdx.x) * cols;
  MaxSum acc{-INFINITY, 0.f};
  if constexpr (kVectorized) {
    const float4* in4 = reinterpret_cast<const float4*>(row_in);
    const int64_t vectors = cols / 4;
    for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
      const float4 v = in4[i];
      acc = fold(fold(fold(fold(acc, v.x), v.y), v.z), v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) acc = fold(acc, row_in[i]);
  }
  const MaxSum total = block_combine(acc);
  const float shift = total.max + logf(total.sum);
  if constexpr (kVectorized) {
    const float4* in4 = reinterpret_cast<const float4*>(row_in);
    float4* out4 = reinterpret_cast<float4*>(row_out);
    const int64_t vectors = cols / 4;
    for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
      float4 v = in4[i];
      v.x -= shift;
      v.y -= shift;
      v.z -= shift;
      v.w -= shift;
      out4[i] = v;
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) row_out[i] = row_in[i] - shift;
  }
}

}  // namespace

cudaError_t launch_log_softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  const bool vectorized = cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>(rows);
  if (vectorized)
    log_softmax_rows_kernel<true><<<blocks, kThreads, 0, stream>>>(x, y, cols);
  else
    log_softmax_rows_kernel<false><<<blocks, kThreads, 0, stream>>>(x, y, cols);
  return cudaGetLastError();
}
