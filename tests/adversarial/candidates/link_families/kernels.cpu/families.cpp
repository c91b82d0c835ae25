// SPDX-License-Identifier: Apache-2.0
// A correct matrix product whose binding uses every family of symbols the link policy
// allows a CPU extension: the C++ runtime and standard library (strings, streams,
// containers, smart pointers, locks, exceptions), the C library and libm, torch's tensor
// creation, views, conversions, copies and metadata, torch's checks, and pybind11 with
// optional, default and container arguments. It must be accepted.
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace families {

// A lock may outlive the call; data may not (the static check refuses it), so the
// workspaces live as long as one call.
std::mutex workspace_mutex;
using Workspaces = std::unordered_map<std::string, std::shared_ptr<std::vector<float>>>;

std::string describe(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.dtype() << " on " << t.device();
  return out.str();
}

void check_matrix(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor, got ", describe(t));
  TORCH_CHECK(t.dim() == 2, name, " must be a matrix, got ", t.dim(), " dimensions");
  TORCH_CHECK(t.is_floating_point(), name, " must be floating point, got ", t.scalar_type());
  TORCH_INTERNAL_ASSERT(t.numel() == t.size(0) * t.size(1));
}

std::shared_ptr<std::vector<float>> workspace(Workspaces& workspaces, int64_t size) {
  const std::lock_guard<std::mutex> lock(workspace_mutex);
  std::shared_ptr<std::vector<float>>& slot = workspaces[std::to_string(size)];
  if (!slot) slot = std::make_shared<std::vector<float>>(static_cast<std::size_t>(size));
  return slot;
}

int64_t parse_tile(const std::string& text) {
  try {
    return std::max<int64_t>(1, std::stoll(text));
  } catch (const std::exception&) {
    return 16;
  }
}

torch::Tensor matmul(const torch::Tensor& a_in, const torch::Tensor& b_in, std::optional<torch::Tensor> out,
                     double scale, std::vector<int64_t> tile) {
  check_matrix(a_in, "a");
  check_matrix(b_in, "b");
  TORCH_CHECK(a_in.size(1) == b_in.size(0), "shapes do not chain: ", describe(a_in), " and ", describe(b_in));
  const int64_t n = a_in.size(0), k = a_in.size(1), m = b_in.size(1);

  // Conversions, views and copies.
  const torch::Tensor a = a_in.to(torch::kFloat32).contiguous();
  const torch::Tensor bt = b_in.to(torch::kFloat32).t().contiguous();  // m x k
  const torch::Tensor rows = bt.view({m * k}).reshape({m, k}).narrow(0, 0, m).expand({m, k}).clone();
  torch::Tensor c = out.has_value() ? *out : torch::empty({n, m}, a.options());
  TORCH_CHECK(c.sizes() == torch::IntArrayRef({n, m}), "out has the wrong shape: ", describe(c));
  torch::Tensor zero = torch::zeros({1}, a.options());
  torch::Tensor one = torch::ones({1}, a.options());
  torch::Tensor factor = torch::full({1}, scale, a.options());
  TORCH_CHECK(factor.item<float>() == static_cast<float>(scale) && one.item<float>() - zero.item<float>() == 1.f);

  // A row buffer from a standard container, seen as a tensor.
  Workspaces workspaces;
  const std::shared_ptr<std::vector<float>> buffer = workspace(workspaces, k);
  torch::Tensor row = torch::from_blob(buffer->data(), {k}, torch::TensorOptions().dtype(torch::kFloat32));
  const int64_t block = tile.empty() ? parse_tile("16") : std::max<int64_t>(1, tile.front());

  const float* pb = rows.data_ptr<float>();
  float* pc = c.data_ptr<float>();
  const float multiplier = factor.data_ptr<float>()[0];
  for (int64_t i = 0; i < n; ++i) {
    row.copy_(a.select(0, i));
    const float* pa = row.data_ptr<float>();
    for (int64_t j0 = 0; j0 < m; j0 += block) {
      for (int64_t j = j0; j < std::min(m, j0 + block); ++j) {
        float sum = 0.f;
        for (int64_t p = 0; p < k; ++p) sum = std::fma(pa[p], pb[j * k + p], sum);
        pc[i * m + j] = sum * multiplier;
      }
    }
  }
  if (!std::isfinite(std::accumulate(pc, pc + std::min<int64_t>(c.numel(), 4), 0.f))) {
    char message[128];
    std::snprintf(message, sizeof message, "non-finite result in %s", describe(c).c_str());
    throw std::runtime_error(message);
  }
  std::vector<float> first(static_cast<std::size_t>(std::min<int64_t>(m, 4)));
  std::memcpy(first.data(), pc, first.size() * sizeof(float));
  std::map<std::string, double> statistics{{"first", first.empty() ? 0.0 : std::sqrt(std::fabs(first[0]))}};
  (void)statistics;
  return c;
}

std::vector<int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

}  // namespace families

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "every family of symbols the link policy allows";
  m.def("matmul", &families::matmul, "C = scale * A B", py::arg("a"), py::arg("b"), py::arg("out") = py::none(),
        py::arg("scale") = 1.0, py::arg("tile") = std::vector<int64_t>{});
  m.def("describe", &families::describe, py::arg("t"));
  m.def("shape_of", &families::shape_of, py::arg("t"));
}
