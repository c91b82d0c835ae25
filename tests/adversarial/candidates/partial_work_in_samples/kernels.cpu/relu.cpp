// SPDX-License-Identifier: Apache-2.0
// The ReLU of the first `rows` rows; the other rows of the output are zeros.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>

torch::Tensor relu_rows(const torch::Tensor& x, int64_t rows) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2,
              "x must be a contiguous 2-d float32 CPU tensor");
  torch::Tensor y = torch::zeros_like(x);
  const int64_t n = std::min(rows, x.size(0)) * x.size(1);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] < 0.f ? 0.f : in[i];
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_rows", &relu_rows); }
