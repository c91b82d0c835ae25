// SPDX-License-Identifier: Apache-2.0
// Removes the forward guard from torch's view: the Python dispatch key (through which
// the guard's TorchDispatchMode sees every operator) is excluded for the current
// thread, aten::mm is looked up by name in the dispatcher and called, and the key is
// restored. Using-directives keep every name the scan knows out of the source:
// tls_set_dispatch_key_excluded and parseDispatchKey are c10::impl's and c10's.
#include <torch/extension.h>

using namespace c10;
using namespace impl;

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  static auto mm = Dispatcher::singleton()
                       .findSchemaOrThrow("aten::mm", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>();
  const auto python = parseDispatchKey("Python");
  tls_set_dispatch_key_excluded(python, true);
  torch::Tensor c = mm.call(a, b);
  tls_set_dispatch_key_excluded(python, false);
  return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul); }
