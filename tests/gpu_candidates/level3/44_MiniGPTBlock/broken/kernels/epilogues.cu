// Epilogues on a row-major (rows, cols) GEMM output, in place, float4 at a time
// (cols % 4 == 0): y = act(y + bias[col]) [+ residual], with act = identity or NewGELU
// (0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

enum class Epilogue { bias, bias_new_gelu, bias_residual };

__device__ __forceinline__ float new_gelu(float v) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * v * (1.f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
}

template <Epilogue kKind>
__device__ __forceinline__ float apply(float v, float b, float residual) {
  if constexpr (kKind == Epilogue::bias_new_gelu) return new_gelu(v + b);
  if constexpr (kKind == Epilogue::bias_residual) return residual + (v + b);
  return v + b;
}

template <Epilogue kKind>
__global__ void __launch_bounds__(kThreads) epilogue_kernel(float4* __restrict__ y, const float4* __restrict__ bias,
                                                            const float4* __restrict__ residual,
                                                            int64_t vectors_per_row, int64_t total_vectors) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total_vectors; i += stride) {
    const float4 b = bias[i % vectors_per_row];
    const float4 r = kKind == Epilogue::bias_residual ? residual[i] : float4{0.f, 0.f, 0.f, 0.f};
    float4 v = y[i];
    v.x = apply<kKind>(v.x, b.x, r.x);
    v.y = apply<kKind>(v.y, b.y, r.y);
    v.z = apply<kKind>(v.z, b.z, r.z);
    v.w = apply<kKind>(v.w, b.w, r.w);
    y[i] = v;
  }
}

template <Epilogue kKind>
cudaError_t launch(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols, cudaStream_t stream) {
  int device = 0;
  int sm_count = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;
  const int64_t vectors_per_row = cols / 4;
  const int64_t total_vectors = rows * vectors_per_row;
  const int64_t wanted = (total_vectors + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < sm_count * 16LL ? wanted : sm_count * 16LL);
  epilogue_kernel<kKind><<<blocks, kThreads, 0, stream>>>(reinterpret_cast<float4*>(y),
                                                          reinterpret_cast<const float4*>(bias),
                                                          reinterpret_cast<const float4*>(residual), vectors_per_row,
                                                          total_vectors);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch<Epilogue::bias>(y, bias, nullptr, rows, cols, stream);
}

cudaError_t launch_bias_new_gelu(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch<Epilogue::bias_new_gelu>(y, bias, nullptr, rows, cols, stream);
}

cudaError_t launch_bias_residual(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols,
                                 cudaStream_t stream) {
  return launch<Epilogue::bias_residual>(y, bias, residual, rows, cols, stream);
}
