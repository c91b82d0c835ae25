// SPDX-License-Identifier: Apache-2.0
// Launchers of the CUDA kernels shared by the adversarial suite's candidates (toolbox.cu),
// called by the bindings (binding.cpp). Plain pointers and sizes: this header needs no torch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace toolbox {

// Fixed shapes of the suite's CUDA matmul task (tasks/cuda/matmul.py).
constexpr int64_t fixed_m = 512, fixed_k = 384, fixed_n = 256;

cudaError_t matmul(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t stream);
cudaError_t matmul_tiled(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t stream);
cudaError_t matmul_fixed(const float* a, const float* b, float* c, cudaStream_t stream);
cudaError_t matmul_half_inputs(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n,
                               cudaStream_t stream);
cudaError_t relu(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t relu_range(const float* x, float* y, int64_t begin, int64_t end, cudaStream_t stream);
cudaError_t add_at(float* y, int64_t index, float value, cudaStream_t stream);
cudaError_t set_at(float* y, int64_t index, float value, cudaStream_t stream);
cudaError_t copy(const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t clamp(const float* x, float* y, int64_t n, float low, float high, cudaStream_t stream);
cudaError_t fill(float* y, int64_t n, float value, cudaStream_t stream);
cudaError_t linear(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in, int64_t out,
                   bool half_operands, cudaStream_t stream);
cudaError_t transpose(const float* w, float* t, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t linear_packed(const float* x, const float* wt, const float* b, float* y, int64_t rows, int64_t in,
                          int64_t out, cudaStream_t stream);
cudaError_t row_sum(const float* x, float* y, int64_t rows, int64_t cols, bool atomic, cudaStream_t stream);
cudaError_t spin(cudaStream_t stream, long long cycles);

}  // namespace toolbox
