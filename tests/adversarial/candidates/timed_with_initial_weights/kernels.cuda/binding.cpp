#include <torch/python.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_bn(const float* x, const float* mean, const float* var, const float* w, const float* b, float eps,
                      float* y, int64_t n, int64_t c, int64_t inner, cudaStream_t stream);
cudaError_t launch_scale(const float* x, float factor, float* y, int64_t count, cudaStream_t stream);

torch::Tensor batch_norm(const torch::Tensor& x, const torch::Tensor& mean, const torch::Tensor& var,
                         const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() >= 2, "x: float32 CUDA (N, C, ...)");
  const c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  const int64_t n = xc.size(0), c = xc.size(1), inner = xc.numel() / (n * c);
  const cudaError_t status =
      launch_bn(xc.data_ptr<float>(), mean.contiguous().data_ptr<float>(), var.contiguous().data_ptr<float>(),
                weight.contiguous().data_ptr<float>(), bias.contiguous().data_ptr<float>(), static_cast<float>(eps),
                y.data_ptr<float>(), n, c, inner, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "launch failed: ", cudaGetErrorString(status));
  return y;
}

torch::Tensor scale(const torch::Tensor& x, double factor) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: float32 CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  const cudaError_t status = launch_scale(xc.data_ptr<float>(), static_cast<float>(factor), y.data_ptr<float>(),
                                          xc.numel(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "launch failed: ", cudaGetErrorString(status));
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("batch_norm", &batch_norm);
  m.def("scale", &scale);
}
