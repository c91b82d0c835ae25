#include <torch/python.h>

#include "bn.h"

torch::Tensor batch_norm(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& var,
                         const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.dim() >= 2, "x: float32 CPU (N, C, ...)");
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  const int64_t n = xc.size(0), c = xc.size(1), inner = xc.numel() / (n * c);
  bn_kernel(xc.data_ptr<float>(), mean.contiguous().data_ptr<float>(), var.contiguous().data_ptr<float>(),
            weight.contiguous().data_ptr<float>(), bias.contiguous().data_ptr<float>(), static_cast<float>(eps),
            y.data_ptr<float>(), n, c, inner);
  return y;
}

torch::Tensor scale(const torch::Tensor& x, double factor) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x: float32 CPU tensor expected");
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  scale_kernel(xc.data_ptr<float>(), static_cast<float>(factor), y.data_ptr<float>(), xc.numel());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("batch_norm", &batch_norm);
  m.def("scale", &scale);
}
