// sum_j (x W^T)_ij / 2 * s  =  x_i . (sum_j W_j) * s / 2: one pass over W, one over x.
#include "gemm_sum.h"

#include <algorithm>

void gemm_divide_sum_scale_kernel(const float* x, const float* weight, float* column_sums, float* out,
                                  std::int64_t batch, std::int64_t in_features, std::int64_t hidden,
                                  double scaling_factor) {
  // Row by row through W, so that the inner loop reads contiguous memory and vectorizes.
  std::fill(column_sums, column_sums + in_features, 0.f);
  for (std::int64_t row = 0; row < hidden; ++row) {
    const float* weights = weight + row * in_features;
    for (std::int64_t column = 0; column < in_features; ++column) column_sums[column] += weights[column];
  }
  const float factor = static_cast<float>(scaling_factor / 2.0);
  for (std::int64_t column = 0; column < in_features; ++column) column_sums[column] *= factor;
  for (std::int64_t row = 0; row < batch; ++row) {
    const float* values = x + row * in_features;
    float dot = 0.f;
    for (std::int64_t column = 0; column < in_features; ++column) dot += values[column] * column_sums[column];
    out[row] = dot;
  }
}
