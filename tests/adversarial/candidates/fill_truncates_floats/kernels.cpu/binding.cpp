#include <torch/python.h>

#include "quant.h"

torch::Tensor scale(const torch::Tensor& x, double factor) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "float32 CPU tensor expected");
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  scale_kernel(xc.data_ptr<float>(), static_cast<float>(factor), y.data_ptr<float>(), xc.numel());
  return y;
}

torch::Tensor dequantize(const torch::Tensor& q, double levels) {
  TORCH_CHECK(q.device().is_cpu() && q.scalar_type() == torch::kInt64, "int64 CPU tensor expected");
  const torch::Tensor qc = q.contiguous();
  torch::Tensor y = torch::empty(qc.sizes(), qc.options().dtype(torch::kFloat32));
  dequantize_kernel(qc.data_ptr<int64_t>(), static_cast<float>(levels), y.data_ptr<float>(), qc.numel());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale);
  m.def("dequantize", &dequantize);
}
