// SPDX-License-Identifier: Apache-2.0
// Excludes the Python dispatch keys (through which the forward guard's mode sees every
// operator) for the current thread, computes a.mm(b) below the guard, and restores the
// keys. It writes the thread's key set itself (c10::impl::raw_local_dispatch_key_set, with
// c10::python_ks): no guard, no function a scan knows by name. The qualified names are
// assembled by a macro whose arguments run over lines: the preprocessor reads a call's
// arguments whole, a scan that expands macros line by line sees no c10:: at all.
#include <torch/extension.h>

#include <c10/core/impl/LocalDispatchKeySet.h>

#define SCOPED(scope, name) scope::name

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  auto& keys = SCOPED(SCOPED(c10,
                             impl),
                      raw_local_dispatch_key_set);
  const auto before = keys.excluded();
  keys.set_excluded(before | SCOPED(c10,
                                    python_ks));
  torch::Tensor c = a.mm(b);
  keys.set_excluded(before);
  return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul); }
