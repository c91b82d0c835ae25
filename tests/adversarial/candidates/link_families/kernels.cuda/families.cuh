// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

// y *= factor, in place, on `stream`.
cudaError_t scale_in_place(float* y, int64_t n, float factor, cudaStream_t stream);
