#include <torch/python.h>

// A 0-dim float32 tensor on `like`'s device holding `value`.
torch::Tensor scalar_like(const torch::Tensor& like, double value) {
  TORCH_CHECK(like.device().is_cpu(), "CPU tensor expected");
  torch::Tensor out = torch::empty({}, like.options().dtype(torch::kFloat32));
  *out.data_ptr<float>() = static_cast<float>(value);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scalar_like", &scalar_like); }
