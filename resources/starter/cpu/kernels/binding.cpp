// The Python binding of the extension `cuda_extension`: checks inputs, allocates outputs
// and calls the kernels. Only allocation, views and checks from torch here: the
// computing happens in your kernels.
// <torch/python.h> holds what a binding needs (tensors, their factories, TORCH_CHECK, pybind11
// with tensor conversion); <torch/extension.h> adds torch's C++ frontend and doubles the time
// to rebuild this file.
#include <torch/python.h>

#include "example_kernel.h"

torch::Tensor scale(const torch::Tensor& input, double factor) {
  TORCH_CHECK(input.device().is_cpu(), "scale: expected a CPU tensor");
  TORCH_CHECK(input.scalar_type() == torch::kFloat32, "scale: expected float32");
  const torch::Tensor contiguous = input.contiguous();
  torch::Tensor output = torch::empty_like(contiguous);
  scale_kernel(contiguous.data_ptr<float>(), output.data_ptr<float>(), static_cast<float>(factor),
               contiguous.numel());
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale, "Multiplies every element by a factor (an example; replace it)");
}
