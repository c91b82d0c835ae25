// Mean cross-entropy: loss_i = logsumexp(x_i) - x_i[t_i], averaged over rows whose target
// is not ignore_index (-100).
//
// cross_entropy_rows: one warp per row (kRowsPerBlock rows per block). Each lane folds its
//   elements into an online (max, sum of exp(x - max)) pair, the warp combines the pairs by
//   butterfly shuffles, and lane 0 forms the row's loss. The block then adds its rows' losses
//   and counts in a fixed order and writes one partial per block.
// cross_entropy_mean: one block adds the partials in a fixed order and divides. No atomics,
//   so the result is bitwise reproducible.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kWarpSize = 32;
constexpr int kRowsPerBlock = 8;
constexpr int kRowThreads = kRowsPerBlock * kWarpSize;
constexpr int kMeanThreads = 1024;
constexpr int64_t kIgnoreIndex = -100;

struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.f};
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

template <bool kVectorized>
__global__ void __launch_bounds__(kRowThreads) cross_entropy_rows(const float* __restrict__ logits,
                                                                  const int64_t* __restrict__ targets, int64_t rows,
                                                                  int64_t classes, float2* __restrict__ partials) {
  __shared__ float row_loss[kRowsPerBlock];
  __shared__ float row_counted[kRowsPerBlock];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  float loss = 0.f;
  float counted = 0.f;
  if (row < rows) {
    const float* x = logits + row * classes;
    MaxSum acc{-INFINITY, 0.f};
    if constexpr (kVectorized) {
      const float4* x4 = reinterpret_cast<const float4*>(x);
      for (int64_t i = lane; i < classes / 4; i += kWarpSize) {
        const float4 v = x4[i];
        acc = fold(fold(fold(fold(acc, v.x), v.y), v.z), v.w);
      }
    } else {
      for (int64_t i = lane; i < classes; i += kWarpSize) acc = fold(acc, x[i]);
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const MaxSum other{__shfl_xor_sync(0xffffffffu, acc.max, offset), __shfl_xor_sync(0xffffffffu, acc.sum, offset)};
      acc = combine(acc, other);
    }
    const int64_t target = targets[row];
    if (target != kIgnoreIndex) {
      // An out-of-range target makes torch raise; here it poisons the loss instead.
      const float picked = (target >= 0 && target < classes) ? x[target] : NAN;
      loss = logf(acc.sum) - picked;
      counted = 1.f;
    }
  }
  if (lane == 0) {
    row_loss[warp] = loss;
    row_counted[warp] = counted;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float block_loss = 0.f, block_counted = 0.f;
    for (int r = 0; r < kRowsPerBlock; ++r) {
      block_loss += row_loss[r];
      block_counted += row_counted[r];
    }
    partials[blockIdx.x] = {block_loss, block_counted};
  }
}

__global__ void __launch_bounds__(kMeanThreads) cross_entropy_mean(const float2* __restrict__ partials,
                                                                   int64_t count, float* __restrict__ out) {
  __shared__ float loss[kMeanThreads];
  __shared__ float counted[kMeanThreads];
  float l = 0.f, c = 0.f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    l += partials[i].x;
    c += partials[i].y;
  }
  loss[threadIdx.x] = l;
  counted[threadIdx.x] = c;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss[threadIdx.x] += loss[threadIdx.x + stride];
      counted[threadIdx.x] += counted[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = loss[0] / counted[0];  // 0/0 = NaN when every target is ignored, as in torch
}

}  // namespace

int64_t cross_entropy_partial_count(int64_t rows) { return (rows + kRowsPerBlock - 1) / kRowsPerBlock; }

cudaError_t launch_cross_entropy(const float* logits, const int64_t* targets, int64_t rows, int64_t classes,
                                 float2* partials, float* out, cudaStream_t stream) {
  const int64_t blocks = cross_entropy_partial_count(rows);
  const bool vectorized = classes % 4 == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0;
  if (vectorized)
    cross_entropy_rows<true><<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(logits, targets, rows, classes,
                                                                                        partials);
  else
    cross_entropy_rows<false><<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(logits, targets, rows,
                                                                                         classes, partials);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  cross_entropy_mean<<<1, kMeanThreads, 0, stream>>>(partials, blocks, out);
  return cudaGetLastError();
}
