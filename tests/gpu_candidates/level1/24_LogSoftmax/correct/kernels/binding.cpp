#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_log_softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

namespace {

torch::Tensor log_softmax_forward(const torch::Tensor& x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t last = x.dim() - 1;
  TORCH_CHECK(dim == last || dim == -1, "this kernel reduces the last dimension only; got dim=", dim,
              " for a tensor of rank ", x.dim());
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty_like(x);
  const int64_t cols = x.size(last);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / cols;
  TORCH_CHECK(rows <= INT32_MAX, "too many rows: ", rows);
  const cudaError_t status =
      launch_log_softmax(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "log_softmax kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &log_softmax_forward, "LogSoftmax over the last dimension (CUDA)", py::arg("x"), py::arg("dim"));
}
