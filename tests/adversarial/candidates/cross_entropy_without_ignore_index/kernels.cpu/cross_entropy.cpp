// SPDX-License-Identifier: Apache-2.0
// log(sum(exp(row))) - row[target] per row, with no ignore_index: a negative target is class 0.
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

torch::Tensor cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.device().is_cpu() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
                  logits.dim() == 2,
              "logits must be a contiguous 2-d float32 CPU tensor");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64 && targets.is_contiguous(), "targets must be int64");
  const int64_t rows = logits.size(0), classes = logits.size(1);
  torch::Tensor loss = torch::empty({rows}, logits.options());
  const float* in = logits.data_ptr<float>();
  const int64_t* target = targets.data_ptr<int64_t>();
  float* out = loss.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * classes;
    float largest = row[0];
    for (int64_t c = 1; c < classes; ++c) largest = std::max(largest, row[c]);
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - largest));
    const int64_t t = std::clamp<int64_t>(target[r], 0, classes - 1);
    out[r] = static_cast<float>(std::log(sum) + largest - row[t]);
  }
  return loss;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("cross_entropy_rows", &cross_entropy_rows); }
