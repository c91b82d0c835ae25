// SPDX-License-Identifier: Apache-2.0
// Layer normalization whose mean and variance come from every stride-th element of a row.
#include <torch/extension.h>

#include <cmath>
#include <cstdint>

torch::Tensor sampled_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 int64_t stride, double eps) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(stride > 0 && weight.numel() > 0 && x.numel() % weight.numel() == 0, "bad shapes or stride");
  const int64_t width = weight.numel();
  const int64_t rows = x.numel() / width;
  const torch::Tensor gamma = weight.contiguous(), beta = bias.contiguous();
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  const float* g = gamma.data_ptr<float>();
  const float* b = beta.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * width;
    double sum = 0, squares = 0;
    int64_t taken = 0;
    for (int64_t i = 0; i < width; i += stride, ++taken) {
      sum += row[i];
      squares += static_cast<double>(row[i]) * row[i];
    }
    const double mean = sum / static_cast<double>(taken);
    const double variance = squares / static_cast<double>(taken) - mean * mean;
    const float shift = static_cast<float>(mean), scale = static_cast<float>(1.0 / std::sqrt(variance + eps));
    for (int64_t i = 0; i < width; ++i) out[r * width + i] = (row[i] - shift) * scale * g[i] + b[i];
  }
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sampled_layer_norm", &sampled_layer_norm); }
