#include <torch/python.h>

#include "widen.h"

torch::Tensor widen(const torch::Tensor& bytes) {
  TORCH_CHECK(bytes.device().is_cpu() && bytes.scalar_type() == torch::kUInt8, "uint8 CPU tensor expected");
  const torch::Tensor bc = bytes.contiguous();
  torch::Tensor out = torch::empty(bc.sizes(), bc.options().dtype(torch::kInt64));
  widen_kernel(bc.data_ptr<uint8_t>(), out.data_ptr<int64_t>(), bc.numel());
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("widen", &widen); }
