#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

// Launchers take raw pointers, sizes and the stream: no torch types, so that the .cu
// files need no torch headers.
cudaError_t launch_scale(const float* input, float* output, float factor, std::int64_t count, cudaStream_t stream);
