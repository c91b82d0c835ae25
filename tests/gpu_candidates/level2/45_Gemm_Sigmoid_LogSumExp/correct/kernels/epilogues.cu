// Epilogues for Gemm -> Sigmoid -> Gemm -> LogSumExp.
//
// bias_sigmoid_kernel: in place on the (rows, cols) hidden matrix, h = 1 / (1 + exp(-(h + b))).
// bias_logsumexp_kernel: one warp per row of the (rows, cols) second GEMM output z;
//   out[row] = logsumexp_j(z[row, j] + b[j]). Each lane folds its elements into an online
//   (max, sum of exp(v - max)) pair and a shfl_down tree leaves the row's pair in lane 0.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;

__global__ void __launch_bounds__(kThreads) bias_sigmoid_kernel(float4* __restrict__ h, const float4* __restrict__ bias,
                                                                int64_t vectors_per_row, int64_t total_vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_vectors; i += stride) {
    const float4 b = bias[i % vectors_per_row];
    float4 v = h[i];
    v.x = 1.f / (1.f + expf(-(v.x + b.x)));
    v.y = 1.f / (1.f + expf(-(v.y + b.y)));
    v.z = 1.f / (1.f + expf(-(v.z + b.z)));
    v.w = 1.f / (1.f + expf(-(v.w + b.w)));
    h[i] = v;
  }
}

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

__global__ void __launch_bounds__(kThreads) bias_logsumexp_kernel(const float* __restrict__ z,
                                                                  const float* __restrict__ bias, int64_t rows,
                                                                  int64_t cols, float* __restrict__ out) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (row >= rows) return;  // whole warps leave together: row is uniform across a warp
  const float* values = z + row * cols;
  MaxSum acc{-INFINITY, 0.f};
  for (int64_t j = lane; j < cols; j += kWarpSize) acc = fold(acc, values[j] + bias[j]);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_down_sync(0xffffffffu, acc.max, offset), __shfl_down_sync(0xffffffffu, acc.sum, offset)};
    acc = combine(acc, other);
  }
  if (lane == 0) out[row] = acc.max + logf(acc.sum);
}

int sm_count_of_current_device(cudaError_t& status) {
  int device = 0;
  int sm_count = 0;
  status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  return sm_count;
}

}  // namespace

cudaError_t launch_bias_sigmoid(float* h, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  const int sm_count = sm_count_of_current_device(status);
  if (status != cudaSuccess) return status;
  const int64_t vectors_per_row = cols / 4;
  const int64_t total_vectors = rows * vectors_per_row;
  const int64_t wanted = (total_vectors + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < sm_count * 16LL ? wanted : sm_count * 16LL);
  bias_sigmoid_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<float4*>(h),
                                                       reinterpret_cast<const float4*>(bias), vectors_per_row,
                                                       total_vectors);
  return cudaGetLastError();
}

cudaError_t launch_bias_logsumexp(const float* z, const float* bias, int64_t rows, int64_t cols, float* out,
                                  cudaStream_t stream) {
  constexpr int64_t rows_per_block = kThreads / kWarpSize;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  bias_logsumexp_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(z, bias, rows, cols, out);
  return cudaGetLastError();
}
