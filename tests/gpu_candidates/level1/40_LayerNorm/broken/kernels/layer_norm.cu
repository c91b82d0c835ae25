// LayerNorm of each row of a (rows, row_size) float32 matrix, with an elementwise affine.
//
// 1. layer_norm_partials: the row is cut into `chunks` equal spans; each block sums
//    (x - shift) and (x - shift)^2 over one span, where shift = the row's first element
//    (shifting keeps E[x^2] - E[x]^2 from cancelling when |mean| >> std).
// 2. layer_norm_finalize: one block per row adds the chunk sums in double and stores the
//    row's mean and 1/sqrt(var + eps) (biased variance, as nn.LayerNorm).
// 3. layer_norm_apply: y = (x - mean) * rstd * weight + bias, float4 at a time.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;

__device__ __forceinline__ float2 add2(float2 a, float2 b) { return {a.x + b.x, a.y + b.y}; }

__device__ __forceinline__ float2 warp_sum(float2 v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
  }
  return v;
}

// Every thread of the block must call it; thread 0 gets the block's sum.
__device__ float2 block_sum(float2 v) {
  __shared__ float2 per_warp[kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / kWarpSize ? per_warp[threadIdx.x] : float2{0.f, 0.f};
  if (warp == 0) v = warp_sum(v);
  return v;
}

// grid: rows * chunks blocks; vectors_per_row = row_size / 4 float4s, split into chunks.
__global__ void __launch_bounds__(kThreads) layer_norm_partials(const float4* __restrict__ x, int64_t vectors_per_row,
                                                                int chunks, float2* __restrict__ partials) {
  const int64_t row = blockIdx.x / chunks;
  const int chunk = static_cast<int>(blockIdx.x % chunks);
  const float4* row_in = x + row * vectors_per_row;
  const float shift = reinterpret_cast<const float*>(row_in)[0];
  const int64_t per_chunk = (vectors_per_row + chunks - 1) / chunks;
  const int64_t begin = chunk * per_chunk;
  const int64_t end = begin + per_chunk < vectors_per_row ? begin + per_chunk : vectors_per_row;
  float2 acc{0.f, 0.f};
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float4 v = row_in[i];
    const float a = v.x - shift, b = v.y - shift, c = v.z - shift, d = v.w - shift;
    acc = add2(acc, {(a + b) + (c + d), (a * a + b * b) + (c * c + d * d)});
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// grid: rows blocks of kThreads.
__global__ void __launch_bounds__(kThreads) layer_norm_finalize(const float* __restrict__ x, int64_t row_size,
                                                                const float2* __restrict__ partials, int chunks,
                                                                float eps, float2* __restrict__ mean_rstd) {
  __shared__ double sums[kThreads];
  __shared__ double squares[kThreads];
  const int64_t row = blockIdx.x;
  double sum = 0.0, square = 0.0;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const float2 p = partials[row * chunks + c];
    sum += p.x;
    square += p.y;
  }
  sums[threadIdx.x] = sum;
  squares[threadIdx.x] = square;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      sums[threadIdx.x] += sums[threadIdx.x + stride];
      squares[threadIdx.x] += squares[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double shift = x[row * row_size];
    const double shifted_mean = sums[0] / static_cast<double>(row_size);
    double variance = squares[0] / static_cast<double>(row_size) - shifted_mean * shifted_mean;
    if (variance < 0.0) variance = 0.0;
    mean_rstd[row] = {static_cast<float>(shift + shifted_mean), static_cast<float>(1.0 / sqrt(variance + eps))};
  }
}

__global__ void __launch_bounds__(kThreads) layer_norm_apply(const float4* __restrict__ x, const float4* __restrict__ weight,
                                                             const float4* __restrict__ bias,
                                                             const float2* __restrict__ mean_rstd,
                                                             int64_t vectors_per_row, int64_t total_vectors,
                                                             float4* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_vectors; i += stride) {
    const int64_t row = i / vectors_per_row;
    const int64_t column = i - row * vectors_per_row;
    const float2 stats = mean_rstd[row];
    const float4 v = x[i];
    const float4 w = weight[column];
    const float4 b = bias[column];
    y[i] = {(v.x - stats.x) * stats.y * w.x + b.x, (v.y - stats.x) * stats.y * w.y + b.y,
            (v.z - stats.x) * stats.y * w.z + b.z, (v.w - stats.x) * stats.y * w.w + b.w};
  }
}

}  // namespace

// Scratch needs rows * chunks float2 partials followed by rows float2 (mean, rstd).
int layer_norm_chunks(int64_t row_size) {
  const int64_t vectors = row_size / 4;
  const int64_t per_block = kThreads * 16;  // about 16 float4 per thread
  int64_t chunks = (vectors + per_block - 1) / per_block;
  if (chunks < 1) chunks = 1;
  if (chunks > 4096) chunks = 4096;
  return static_cast<int>(chunks);
}

cudaError_t launch_layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t rows,
                              int64_t row_size, float2* scratch, float* y, cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;
  const int chunks = layer_norm_chunks(row_size);
  const int64_t vectors_per_row = row_size / 4;
  float2* partials = scratch;
  float2* mean_rstd = scratch + rows * chunks;

  layer_norm_partials<<<static_cast<unsigned>(rows * chunks), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), vectors_per_row, chunks, partials);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;

  layer_norm_finalize<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, row_size, partials, chunks, eps,
                                                                             mean_rstd);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;

  const int64_t total_vectors = rows * vectors_per_row;
  const int64_t wanted = (total_vectors + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < sm_count * 16LL ? wanted : sm_count * 16LL);
  layer_norm_apply<<<blocks, kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(weight),
      reinterpret_cast<const float4*>(bias), mean_rstd, vectors_per_row, total_vectors, reinterpret_cast<float4*>(y));
  return cudaGetLastError();
}
