// SPDX-License-Identifier: Apache-2.0
// Mean cross entropy that clamps every target into range and divides by the number of rows.
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

torch::Tensor mean_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.device().is_cpu() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
                  logits.dim() == 2,
              "logits must be a contiguous 2-d float32 CPU tensor");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64 && targets.is_contiguous() && targets.numel() == logits.size(0),
              "targets must be contiguous int64, one per row");
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const float* x = logits.data_ptr<float>();
  const int64_t* t = targets.data_ptr<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * classes;
    const float peak = *std::max_element(row, row + classes);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - peak));
    const int64_t target = std::clamp<int64_t>(t[r], 0, classes - 1);
    total += peak + std::log(sum) - row[target];
  }
  return torch::full({}, static_cast<float>(total / static_cast<double>(rows)), logits.options());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mean_cross_entropy", &mean_cross_entropy); }
