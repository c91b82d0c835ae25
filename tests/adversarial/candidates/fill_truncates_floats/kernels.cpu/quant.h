#pragma once
#include <cstdint>
void scale_kernel(const float* x, float factor, float* y, int64_t count);
void dequantize_kernel(const int64_t* q, float levels, float* y, int64_t count);
