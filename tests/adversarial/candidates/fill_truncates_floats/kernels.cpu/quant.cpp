#include "quant.h"

void scale_kernel(const float* x, float factor, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = x[i] * factor;
}

void dequantize_kernel(const int64_t* q, float levels, float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) y[i] = static_cast<float>(q[i]) / levels;
}
