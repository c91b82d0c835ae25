#include "bn.h"

#include <cmath>

void bn_kernel(const float* x, const float* mean, const float* var, const float* w, const float* b, float eps,
               float* y, int64_t n, int64_t c, int64_t inner) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      const float s = w[j] / std::sqrt(var[j] + eps);
      const float t = b[j] - mean[j] * s;
      const int64_t base = (i * c + j) * inner;
      for (int64_t k = 0; k < inner; ++k) y[base + k] = x[base + k] * s + t;
    }
  }
}

void scale_kernel(const float* x, float factor, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] * factor;
}
