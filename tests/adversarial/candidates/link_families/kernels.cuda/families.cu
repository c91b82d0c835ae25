// SPDX-License-Identifier: Apache-2.0
#include "families.cuh"

// Inline PTX belongs in device code: a fused multiply-add spelled out.
__device__ __forceinline__ float scaled(float value, float factor) {
  float result;
  asm("fma.rn.f32 %0, %1, %2, 0f00000000;" : "=f"(result) : "f"(value), "f"(factor));
  return result;
}

__global__ void __launch_bounds__(256) scale_kernel(float* y, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = scaled(y[i], factor);
}

cudaError_t scale_in_place(float* y, int64_t n, float factor, cudaStream_t stream) {
  cudaError_t status = cudaFuncSetAttribute(scale_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0);
  if (status != cudaSuccess) return status;
  int blocks_per_multiprocessor = 0, device = 0, multiprocessors = 0;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_multiprocessor, scale_kernel, 256, 0);
  if (status != cudaSuccess) return status;
  if ((status = cudaGetDevice(&device)) != cudaSuccess) return status;
  if ((status = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return status;
  const int64_t wanted = (n + 255) / 256;
  const int64_t resident = static_cast<int64_t>(blocks_per_multiprocessor) * multiprocessors;
  const unsigned blocks = static_cast<unsigned>(wanted < resident || resident == 0 ? wanted : resident);
  if (blocks == 0) return cudaSuccess;
  scale_kernel<<<blocks, 256, 0, stream>>>(y, n, factor);
  return cudaGetLastError();
}
