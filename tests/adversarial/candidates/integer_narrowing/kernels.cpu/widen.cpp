#include "widen.h"

void widen_kernel(const uint8_t* in, int64_t* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(in[i]);
}
