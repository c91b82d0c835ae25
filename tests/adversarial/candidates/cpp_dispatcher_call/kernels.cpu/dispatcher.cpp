// SPDX-License-Identifier: Apache-2.0
#include <torch/extension.h>

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("aten::mm", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>();
  return op.call(a, b);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul); }
