// SPDX-License-Identifier: Apache-2.0
#include <torch/extension.h>

void relu_later_launch(const float* x, float* y, int64_t n, int device);

torch::Tensor relu_later(torch::Tensor x) {
  torch::Tensor y = torch::empty_like(x);
  relu_later_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), x.get_device());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_later", &relu_later); }
