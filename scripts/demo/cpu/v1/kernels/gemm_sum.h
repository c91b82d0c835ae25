#pragma once

#include <cstdint>

// out[row] = (x[row] . column sums of weight) * scaling_factor / 2, the whole model.
void gemm_divide_sum_scale_kernel(const float* x, const float* weight, float* column_sums, float* out,
                                  std::int64_t batch, std::int64_t in_features, std::int64_t hidden,
                                  double scaling_factor);
