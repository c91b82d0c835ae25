// SPDX-License-Identifier: Apache-2.0
// A using-directive brings ATen's namespace into scope; the call below then names
// at::cpu::clamp_min, ATen's CPU kernel, without an at:: for a scan to see. The kernel runs
// without the dispatcher, so the forward guard sees no operator either.
#include <torch/extension.h>

#include <ATen/CPUFunctions.h>

using namespace at;

torch::Tensor rectify(const torch::Tensor& x) { return cpu::clamp_min(x, 0); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &rectify); }
