// Causal ReLU attention: y[b, t, h*hs + d] = sum_{j <= t} relu(q_t . k_j * scale) v_j[d],
// with q, k, v read from the (B*T, 3C) output of the qkv projection (q | k | v per row, head
// h at columns h*hs .. h*hs + hs - 1 of each part).
//
// One block of 256 threads per (64-query tile, head, batch). The query tile is staged in
// shared memory once; for each causal key tile (kt <= qt) the K and V tiles are staged, the
// block computes the 64 x 64 scores (each thread a 4 x 4 set, rows ty + 16i and columns
// tx + 16j, so the shared reads are broadcasts or conflict-free), masks keys after the query
// and applies ReLU, stores the scores, and accumulates scores @ V into its 4 x 4 outputs.
// Rows are padded to kHeadDim + 1 floats to keep the column reads conflict-free.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kHeadDim = 64;
constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kSide = 16;  // threads per side of the 16 x 16 thread grid
constexpr int kPer = kTile / kSide;
constexpr int kStride = kHeadDim + 1;

__device__ __forceinline__ void load_tile(float* tile, const float* qkv, int64_t row_stride, int64_t first_row,
                                          int rows_valid, int column) {
  // kTile rows x kHeadDim floats; thread i loads float i, i + 256, ... (coalesced per row).
  for (int i = threadIdx.x; i < kTile * kHeadDim; i += kThreads) {
    const int r = i / kHeadDim;
    const int d = i % kHeadDim;
    tile[r * kStride + d] = r < rows_valid ? qkv[(first_row + r) * row_stride + column + d] : 0.f;
  }
}

__global__ void __launch_bounds__(kThreads) relu_attention_kernel(const float* __restrict__ qkv, float* __restrict__ y,
                                                                  int seq_len, int embed, float scale) {
  extern __shared__ float shared[];
  float* q_tile = shared;
  float* k_tile = q_tile + kTile * kStride;
  float* v_tile = k_tile + kTile * kStride;
  float* scores = v_tile + kTile * kStride;

  const int query_tile = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t batch = blockIdx.z;
  const int tx = threadIdx.x % kSide;
  const int ty = threadIdx.x / kSide;
  const int64_t row_stride = 3LL * embed;
  const int64_t batch_row = batch * seq_len;
  const int q0 = query_tile * kTile;

  load_tile(q_tile, qkv, row_stride, batch_row + q0, min(kTile, seq_len - q0), head * kHeadDim);

  float out[kPer][kPer] = {};
  for (int key_tile = 0; key_tile <= query_tile; ++key_tile) {
    const int k0 = key_tile * kTile;
    const int keys_valid = min(kTile, seq_len - k0);
    __syncthreads();  // the previous tile's K, V and scores are no longer read
    load_tile(k_tile, qkv, row_stride, batch_row + k0, keys_valid, embed + head * kHeadDim);
    load_tile(v_tile, qkv, row_stride, batch_row + k0, keys_valid, 2 * embed + head * kHeadDim);
    __syncthreads();

    float s[kPer][kPer] = {};
    for (int d = 0; d < kHeadDim; ++d) {
      float qv[kPer], kv[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) qv[i] = q_tile[(ty + kSide * i) * kStride + d];
#pragma unroll
      for (int j = 0; j < kPer; ++j) kv[j] = k_tile[(tx + kSide * j) * kStride + d];
#pragma unroll
      for (int i = 0; i < kPer; ++i)
#pragma unroll
        for (int j = 0; j < kPer; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int query = q0 + ty + kSide * i;
        const int key = k0 + tx + kSide * j;
        const float v = s[i][j] * scale;
        scores[(ty + kSide * i) * kStride + tx + kSide * j] = (key > query || v < 0.f) ? 0.f : v;
      }
    }
    __syncthreads();

    for (int c = 0; c < kTile; ++c) {
      float sv[kPer], vv[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) sv[i] = scores[(ty + kSide * i) * kStride + c];
#pragma unroll
      for (int j = 0; j < kPer; ++j) vv[j] = v_tile[c * kStride + tx + kSide * j];
#pragma unroll
      for (int i = 0; i < kPer; ++i)
#pragma unroll
        for (int j = 0; j < kPer; ++j) out[i][j] = fmaf(sv[i], vv[j], out[i][j]);
    }
  }

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int query = q0 + ty + kSide * i;
    if (query >= seq_len) continue;
    float* row = y + (batch_row + query) * embed + head * kHeadDim;
#pragma unroll
    for (int j = 0; j < kPer; ++j) row[tx + kSide * j] = out[i][j];
  }
}

}  // namespace

bool relu_attention_supports(int head_dim) { return head_dim == kHeadDim; }

cudaError_t launch_relu_attention(const float* qkv, float* y, int batch, int seq_len, int heads, float scale,
                                  cudaStream_t stream) {
  constexpr int shared_bytes = 4 * kTile * kStride * sizeof(float);
  if (cudaError_t status =
          cudaFuncSetAttribute(relu_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
      status != cudaSuccess)
    return status;
  const dim3 grid((seq_len + kTile - 1) / kTile, heads, batch);
  relu_attention_kernel<<<grid, kThreads, shared_bytes, stream>>>(qkv, y, seq_len, heads * kHeadDim, scale);
  return cudaGetLastError();
}
