// An example kernel, to show the layout: plain C++ working on raw pointers, declared in
// a header and called from binding.cpp. Replace it with your own kernels.
#include "example_kernel.h"

void scale_kernel(const float* input, float* output, float factor, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) output[i] = input[i] * factor;
}
