// Causal softmax attention, flash style: y[b, t, h*hs + d] = sum_{j <= t} p_tj v_j[d] with
// p_tj = softmax_j(q_t . k_j * scale), reading q, k, v from the (B*T, 3C) qkv projection.
//
// One block of 256 threads (a 16 x 16 grid) per (64-query tile, head, batch). The query tile
// is staged once; for each causal key tile (kt <= qt) the K and V tiles are staged and every
// thread computes a 4 x 4 set of scores (rows ty + 16i, keys tx + 16j). Each query row keeps
// a running maximum m and sum l: the tile's row maximum is combined across the 16 threads
// sharing the row (xor shuffles with offsets < 16 stay inside a half-warp), the output
// accumulators and l are rescaled by exp(m_old - m_new), and exp(s - m_new) is staged in
// shared memory for the p @ V product. The result is divided by l at the end.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int kHeadDim = 96;
constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kSide = 16;
constexpr int kRows = kTile / kSide;      // query rows per thread
constexpr int kKeys = kTile / kSide;      // keys per thread
constexpr int kDims = kHeadDim / kSide;   // output dimensions per thread
constexpr int kStride = kHeadDim + 1;     // padded row of q, k, v tiles
constexpr int kScoreStride = kTile + 1;   // padded row of the probability tile

__device__ __forceinline__ void load_tile(float* tile, const float* qkv, int64_t row_stride, int64_t first_row,
                                          int rows_valid, int column) {
  for (int i = threadIdx.x; i < kTile * kHeadDim; i += kThreads) {
    const int r = i / kHeadDim;
    const int d = i % kHeadDim;
    tile[r * kStride + d] = r < rows_valid ? qkv[(first_row + r) * row_stride + column + d] : 0.f;
  }
}

// Max or sum over the 16 threads (tx = 0..15) that share a query row.
__device__ __forceinline__ float row_max(float v) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kThreads) causal_attention_kernel(const float* __restrict__ qkv,
                                                                    float* __restrict__ y, int seq_len, int embed,
                                                                    float scale) {
  extern __shared__ float shared[];
  float* q_tile = shared;
  float* k_tile = q_tile + kTile * kStride;
  float* v_tile = k_tile + kTile * kStride;
  float* probabilities = v_tile + kTile * kStride;

  const int query_tile = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t batch = blockIdx.z;
  const int tx = threadIdx.x % kSide;
  const int ty = threadIdx.x / kSide;
  const int64_t row_stride = 3LL * embed;
  const int64_t batch_row = batch * seq_len;
  const int q0 = query_tile * kTile;

  load_tile(q_tile, qkv, row_stride, batch_row + q0, min(kTile, seq_len - q0), head * kHeadDim);

  float out[kRows][kDims] = {};
  float running_max[kRows];
  float running_sum[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    running_max[i] = -INFINITY;
    running_sum[i] = 0.f;
  }

  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    const int keys_valid = min(kTile, seq_len - k0);
    __syncthreads();  // the previous tile's K, V and probabilities are no longer read
    load_tile(k_tile, qkv, row_stride, batch_row + k0, keys_valid, embed + head * kHeadDim);
    load_tile(v_tile, qkv, row_stride, batch_row + k0, keys_valid, 2 * embed + head * kHeadDim);
    __syncthreads();

    float s[kRows][kKeys] = {};
    for (int d = 0; d < kHeadDim; ++d) {
      float qv[kRows], kv[kKeys];
#pragma unroll
      for (int i = 0; i < kRows; ++i) qv[i] = q_tile[(ty + kSide * i) * kStride + d];
#pragma unroll
      for (int j = 0; j < kKeys; ++j) kv[j] = k_tile[(tx + kSide * j) * kStride + d];
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < kKeys; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }

#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int query = q0 + ty + kSide * i;
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        const int key = k0 + tx + kSide * j;
        s[i][j] = (key > query || key >= seq_len) ? -INFINITY : s[i][j] * scale;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      tile_max = row_max(tile_max);
      const float new_max = fmaxf(running_max[i], tile_max);
      // Rows past the end of the sequence see only masked keys; keep them finite.
      const float reference = new_max == -INFINITY ? 0.f : new_max;
      float tile_sum = 0.f;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        const float p = expf(s[i][j] - reference);
        probabilities[(ty + kSide * i) * kScoreStride + tx + kSide * j] = p;
        tile_sum += p;
      }
      tile_sum = row_sum(tile_sum);
      const float rescale = expf(running_max[i] - reference);
      running_sum[i] = running_sum[i] * rescale + tile_sum;
      running_max[i] = new_max;
    }
    __syncthreads();

    for (int c = 0; c < kTile; ++c) {
      float pv[kRows], vv[kDims];
#pragma unroll
      for (int i = 0; i < kRows; ++i) pv[i] = probabilities[(ty + kSide * i) * kScoreStride + c];
#pragma unroll
      for (int e = 0; e < kDims; ++e) vv[e] = v_tile[c * kStride + tx + kSide * e];
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int e = 0; e < kDims; ++e) out[i][e] = fmaf(pv[i], vv[e], out[i][e]);
    }
  }

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int query = q0 + ty + kSide * i;
    if (query >= seq_len) continue;
    float* row = y + (batch_row + query) * embed + head * kHeadDim;
    const float inverse = 1.f / running_sum[i];
#pragma unroll
    for (int e = 0; e < kDims; ++e) row[tx + kSide * e] = out[i][e] * inverse;
  }
}

}  // namespace

bool causal_attention_supports(int head_dim) { return head_dim == kHeadDim; }

cudaError_t launch_causal_attention(const float* qkv, float* y, int batch, int seq_len, int heads, float scale,
                                    cudaStream_t stream) {
  constexpr int shared_bytes = (3 * kTile * kStride + kTile * kScoreStride) * sizeof(float);
  if (cudaError_t status =
          cudaFuncSetAttribute(causal_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
      status != cudaSuccess)
    return status;
  const dim3 grid((seq_len + kTile - 1) / kTile, heads, batch);
  causal_attention_kernel<<<grid, kThreads, shared_bytes, stream>>>(qkv, y, seq_len, heads * kHeadDim, scale);
  return cudaGetLastError();
}
