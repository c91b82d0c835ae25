// Sum of a contiguous float32 tensor viewed as (outer, reduce, inner) over the middle
// dimension. Thread j of block (bx, by) computes y[by, j + bx * blockDim.x] with four
// independent accumulators so that four loads are in flight per thread.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) sum_middle_dim_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                  int64_t reduce, int64_t inner) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= inner) return;
  const int64_t outer_index = blockIdx.y;
  const float* column = x + outer_index * reduce * inner + j;
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
  int64_t r = 0;
  for (; r + 4 <= reduce; r += 4) {
    a0 += column[r * inner];
    a1 += column[(r + 1) * inner];
    a2 += column[(r + 2) * inner];
    a3 += column[(r + 3) * inner];
  }
  for (; r < reduce; ++r) a0 += column[r * inner];
  y[outer_index * inner + j] = (a0 + a1) + (a2 + a3);
}

}  // namespace

cudaError_t launch_sum_middle_dim(const float* x, float* y, int64_t outer, int64_t reduce, int64_t inner,
                                  cudaStream_t stream) {
  const unsigned column_blocks = static_cast<unsigned>(inner / kThreads);
  const dim3 grid(column_blocks, static_cast<unsigned>(outer));
  sum_middle_dim_kernel<<<grid, kThreads, 0, stream>>>(x, y, reduce, inner);
  return cudaGetLastError();
}
