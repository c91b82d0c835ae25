// Epilogue on the (rows, features) GEMM output, in place. One block per (row, group):
//   v = y + linear_bias                       (the GEMM ran without bias)
//   mean = sum(v) / n, var = sum((v - mean)^2) / n   (two passes; the group stays in L1)
//   y = clamp((v - mean) * rsqrt(var + eps) * gamma + beta, lo, hi)
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 128;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Every thread gets the block's sum. `scratch` must hold one float per warp and must not be
// reused by the caller until every thread has returned (the two calls below use two arrays).
__device__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < num_warps - 1; ++w) total += scratch[w];
  return total;
}

__global__ void __launch_bounds__(kThreads) group_norm_hardtanh_kernel(
    float* __restrict__ y, const float* __restrict__ linear_bias, const float* __restrict__ gamma,
    const float* __restrict__ beta, int64_t features, int group_size, int groups, float eps, float lo, float hi) {
  __shared__ float sums[kThreads / kWarpSize];
  __shared__ float squares[kThreads / kWarpSize];
  const int64_t row = blockIdx.x / groups;
  const int group = blockIdx.x % groups;
  const int64_t first = static_cast<int64_t>(group) * group_size;
  float* values = y + row * features + first;

  float sum = 0.f;
  for (int i = threadIdx.x; i < group_size; i += blockDim.x) sum += values[i] + linear_bias[first + i];
  const float mean = block_sum(sum, sums) / static_cast<float>(group_size);

  float square = 0.f;
  for (int i = threadIdx.x; i < group_size; i += blockDim.x) {
    const float d = values[i] + linear_bias[first + i] - mean;
    square += d * d;
  }
  const float variance = block_sum(square, squares) / static_cast<float>(group_size);
  const float rstd = rsqrtf(variance + eps);

  for (int i = threadIdx.x; i < group_size; i += blockDim.x) {
    const int64_t feature = first + i;
    const float normalized = (values[i] + linear_bias[feature] - mean) * rstd * gamma[feature] + beta[feature];
    values[i] = fminf(fmaxf(normalized, lo), hi);
  }
}

}  // namespace

cudaError_t launch_group_norm_hardtanh(float* y, const float* linear_bias, const float* gamma, const float* beta,
                                       int64_t rows, int64_t features, int groups, float eps, float lo, float hi,
                                       cudaStream_t stream) {
  const int group_size = static_cast<int>(features / groups);
  group_norm_hardtanh_kernel<<<static_cast<unsigned>(rows * groups), kThreads, 0, stream>>>(
      y, linear_bias, gamma, beta, features, group_size, groups, eps, lo, hi);
  return cudaGetLastError();
}
