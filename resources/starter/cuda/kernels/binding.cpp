// The Python binding of the extension `cuda_extension`: checks inputs, allocates outputs
// and launches kernels on the current stream. Only allocation, views and checks from
// torch here: the computing happens in your kernels.
// <torch/python.h> holds what a binding needs (tensors, their factories, TORCH_CHECK, pybind11
// with tensor conversion); <torch/extension.h> adds torch's C++ frontend and doubles the time
// to rebuild this file.
#include <torch/python.h>

#include <ATen/cuda/CUDAContext.h>

#include "example_kernel.h"

torch::Tensor scale(const torch::Tensor& input, double factor) {
  TORCH_CHECK(input.is_cuda(), "scale: expected a CUDA tensor");
  TORCH_CHECK(input.scalar_type() == torch::kFloat32, "scale: expected float32");
  const torch::Tensor contiguous = input.contiguous();
  torch::Tensor output = torch::empty_like(contiguous);
  const cudaError_t status = launch_scale(contiguous.data_ptr<float>(), output.data_ptr<float>(),
                                          static_cast<float>(factor), contiguous.numel(),
                                          at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "scale: kernel launch failed: ", cudaGetErrorString(status));
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale, "Multiplies every element by a factor (an example; replace it)");
}
