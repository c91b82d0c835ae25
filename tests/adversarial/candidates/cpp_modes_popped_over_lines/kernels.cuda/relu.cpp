// SPDX-License-Identifier: Apache-2.0
// Takes torch's dispatch modes off their stack (the forward guard's among them) around
// torch.relu, with torch.utils._python_dispatch._disable_current_modes, and puts them back.
// The pybind11 spellings a scan refuses (py::module_::import, .attr(...)) are assembled by
// macros whose arguments run over two lines: the preprocessor reads a call's arguments
// whole, a scan that expands macros line by line sees neither half.
#include <torch/extension.h>

#define SCOPED(scope, name) scope::name
#define MEMBER(object, name) object.name

torch::Tensor relu(const torch::Tensor& x) {
  auto dispatch = SCOPED(py::module_,
                         import)("torch.utils._python_dispatch");
  auto modes_off = MEMBER(dispatch,
                          attr)("_disable_current_modes")();
  MEMBER(modes_off,
         attr)("__enter__")();
  auto torch_module = SCOPED(py::module_,
                             import)("torch");
  torch::Tensor y = MEMBER(torch_module,
                           attr)("relu")(x).cast<torch::Tensor>();
  MEMBER(modes_off,
         attr)("__exit__")(py::none(), py::none(), py::none());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
