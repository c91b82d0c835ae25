// An example kernel and its launcher, to show the layout: kernels in .cu files without
// torch headers (they compile in about a second), launchers declared in a header, and
// the torch-facing code in binding.cpp. Replace it with your own kernels.
#include "example_kernel.h"

namespace {

__global__ void scale_kernel(const float* __restrict__ input, float* __restrict__ output, float factor,
                             std::int64_t count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    output[i] = input[i] * factor;
}

}  // namespace

cudaError_t launch_scale(const float* input, float* output, float factor, std::int64_t count, cudaStream_t stream) {
  constexpr int threads = 256;
  const std::int64_t wanted = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 65535 ? (wanted > 0 ? wanted : 1) : 65535);
  scale_kernel<<<blocks, threads, 0, stream>>>(input, output, factor, count);
  return cudaGetLastError();
}
