// SPDX-License-Identifier: Apache-2.0
// Layer normalization whose mean comes from every stride-th element of a row; the variance
// is taken over the whole row around that mean.
#include <torch/extension.h>

#include <cmath>
#include <cstdint>

torch::Tensor strided_mean_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
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
    double sum = 0;
    int64_t taken = 0;
    for (int64_t i = 0; i < width; i += stride, ++taken) sum += row[i];
    const double mean = sum / static_cast<double>(taken);
    double squares = 0;
    for (int64_t i = 0; i < width; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const float shift = static_cast<float>(mean);
    const float scale = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(width) + eps));
    for (int64_t i = 0; i < width; ++i) out[r * width + i] = (row[i] - shift) * scale * g[i] + b[i];
  }
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("strided_mean_layer_norm", &strided_mean_layer_norm); }
