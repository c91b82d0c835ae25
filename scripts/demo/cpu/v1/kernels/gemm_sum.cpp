// sum_j (x W^T)_ij / 2 * s  =  x_i . (sum_j W_j) * s / 2: one pass over W, one over x.
#include "gemm_sum.h"

void gemm_divide_sum_scale_kernel(const float* x, const float* weight, float* column_sums, float* out,
                                  std::int64_t batch, std::int64_t in_features, std::int64_t hidden,
                                  double scaling_factor) {
  const float factor = static_cast<float>(scaling_factor);
  for (std::int64_t column = 0; column < in_features; ++column) {
    float sum = 0.f;
    for (std::int64_t row = 0; row < hidden; ++row) sum += weight[row * in_features + column];
    column_sums[column] = sum * factor;
  }
  for (std::int64_t row = 0; row < batch; ++row) {
    float dot = 0.f;
    for (std::int64_t column = 0; column < in_features; ++column) dot += x[row * in_features + column] * column_sums[column];
    out[row] = dot;
  }
}
