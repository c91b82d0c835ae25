// SPDX-License-Identifier: Apache-2.0
// A layer norm in two passes (mean, then the mean of squared deviations) that leaves the
// epsilon out: exact enough on every row that has a spread, which rows of torch.rand always
// have, and zero divided by zero on a constant row, where the reference gives the bias.
#include <torch/extension.h>

#include <cmath>
#include <cstdint>

torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 CPU tensor");
  const torch::Tensor w = weight.contiguous();
  const torch::Tensor b = bias.contiguous();
  torch::Tensor y = torch::empty_like(x);
  const int64_t row = w.numel();
  const int64_t rows = x.numel() / row;
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = in + r * row;
    double sum = 0.0;
    for (int64_t i = 0; i < row; ++i) sum += v[i];
    const double mean = sum / row;
    double squares = 0.0;
    for (int64_t i = 0; i < row; ++i) squares += (v[i] - mean) * (v[i] - mean);
    const double inverse = 1.0 / std::sqrt(squares / row);
    for (int64_t i = 0; i < row; ++i)
      out[r * row + i] = static_cast<float>((v[i] - mean) * inverse) * w.data_ptr<float>()[i] + b.data_ptr<float>()[i];
  }
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("layer_norm", &layer_norm); }
