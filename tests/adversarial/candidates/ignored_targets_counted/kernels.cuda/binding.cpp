// SPDX-License-Identifier: Apache-2.0
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include <cuda_runtime.h>

cudaError_t mean_cross_entropy_launch(const float* logits, const int64_t* targets, float* losses, float* out,
                                      int64_t rows, int64_t classes, cudaStream_t stream);

torch::Tensor mean_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.is_cuda() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
                  logits.dim() == 2,
              "logits must be a contiguous 2-d float32 CUDA tensor");
  TORCH_CHECK(targets.is_cuda() && targets.scalar_type() == torch::kInt64 && targets.is_contiguous() &&
                  targets.numel() == logits.size(0),
              "targets must be contiguous int64 on the GPU, one per row");
  const c10::cuda::CUDAGuard guard(logits.device());
  torch::Tensor losses = torch::empty({logits.size(0)}, logits.options());
  torch::Tensor out = torch::empty({}, logits.options());
  const cudaError_t status =
      mean_cross_entropy_launch(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), losses.data_ptr<float>(),
                                out.data_ptr<float>(), logits.size(0), logits.size(1),
                                at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == cudaSuccess, "mean_cross_entropy: ", cudaGetErrorString(status));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mean_cross_entropy", &mean_cross_entropy); }
