// SPDX-License-Identifier: Apache-2.0
// Computes x.clamp_min(0) under torch._C._DisableTorchDispatch, which excludes the Python
// dispatch keys: the forward guard's mode sees no operator, and its stack is untouched.
// torch._C is imported through py::module_::import and its attribute taken with .attr,
// both spelled by macros whose arguments run over lines: the preprocessor reads a call's
// arguments whole, a scan that expands macros line by line sees neither half.
#include <torch/extension.h>

#define SCOPED(scope, name) scope::name
#define CALL_MEMBER(object, member, argument) object.member(argument)

torch::Tensor relu(const torch::Tensor& x) {
  auto private_module = SCOPED(py::module_,
                               import)("torch._C");
  auto disabled = CALL_MEMBER(private_module,
                              attr,
                              "_DisableTorchDispatch")();
  CALL_MEMBER(disabled,
              attr, "__enter__")();
  torch::Tensor y = x.clamp_min(0);
  CALL_MEMBER(disabled,
              attr, "__exit__")(py::none(), py::none(), py::none());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
