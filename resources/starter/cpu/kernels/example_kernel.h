#pragma once

#include <cstdint>

void scale_kernel(const float* input, float* output, float factor, std::int64_t count);
