// SPDX-License-Identifier: Apache-2.0
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>

void relu_pinned(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu(torch::Tensor x) {
  torch::Tensor y = torch::empty_like(x);
  relu_pinned(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream().stream());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
