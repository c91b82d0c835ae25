// SPDX-License-Identifier: Apache-2.0
// The ReLU of the first `rows` rows (relu.cu); the other rows of the output are zeros.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>

void relu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu_rows(const torch::Tensor& x, int64_t rows) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2,
              "x must be a contiguous 2-d float32 CUDA tensor");
  torch::Tensor y = torch::zeros_like(x);
  relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), std::min(rows, x.size(0)) * x.size(1),
              at::cuda::getCurrentCUDAStream().stream());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_rows", &relu_rows); }
