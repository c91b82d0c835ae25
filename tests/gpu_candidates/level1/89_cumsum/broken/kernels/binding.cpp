#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_cumsum_rows(const float* x, float* y, int64_t rows, int64_t length, cudaStream_t stream);

namespace {

torch::Tensor cumsum_forward(const torch::Tensor& x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  if (dim < 0) dim += x.dim();
  TORCH_CHECK(dim == x.dim() - 1, "this kernel scans the last dimension only; got dim=", dim, " for rank ", x.dim());
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t length = x.size(dim);
  const int64_t rows = x.numel() / length;
  TORCH_CHECK(rows <= INT32_MAX, "too many rows: ", rows);
  const cudaError_t status =
      launch_cumsum_rows(x.data_ptr<float>(), y.data_ptr<float>(), rows, length, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "cumsum kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &cumsum_forward, "Inclusive cumulative sum along the last dimension (CUDA)", py::arg("x"),
        py::arg("dim"));
}
