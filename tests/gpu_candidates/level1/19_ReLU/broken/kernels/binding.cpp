#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream);

namespace {

torch::Tensor relu_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty_like(x);
  if (x.numel() == 0) return y;
  const cudaError_t status =
      launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "relu kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &relu_forward, "ReLU (CUDA)", py::arg("x")); }
