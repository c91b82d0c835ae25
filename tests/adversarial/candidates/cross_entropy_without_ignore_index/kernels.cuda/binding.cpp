// SPDX-License-Identifier: Apache-2.0
// The cross entropy of each row (cross_entropy.cu), with no ignore_index: a negative target
// is class 0.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>

#include <cstdint>

void cross_entropy_launch(const float* logits, const int64_t* targets, float* loss, int64_t rows, int64_t classes,
                          cudaStream_t stream);

torch::Tensor cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.is_cuda() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
                  logits.dim() == 2,
              "logits must be a contiguous 2-d float32 CUDA tensor");
  TORCH_CHECK(targets.is_cuda() && targets.scalar_type() == torch::kInt64 && targets.is_contiguous(),
              "targets must be int64 on the GPU");
  torch::Tensor loss = torch::empty({logits.size(0)}, logits.options());
  cross_entropy_launch(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), loss.data_ptr<float>(), logits.size(0),
                       logits.size(1), at::cuda::getCurrentCUDAStream().stream());
  return loss;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("cross_entropy_rows", &cross_entropy_rows); }
