#pragma once
#include <cstdint>
void widen_kernel(const uint8_t* in, int64_t* out, int64_t count);
