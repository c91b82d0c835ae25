#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>  // vector

cudaError_t launch_sum_middle_dim(const float* x, float* y, int64_t outer, int64_t reduce, int64_t inner,
                                  cudaStream_t stream);

namespace {

torch::Tensor sum_forward(const torch::Tensor& x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  if (dim < 0) dim += x.dim();
  TORCH_CHECK(dim >= 0 && dim < x.dim(), "dim out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t reduce = x.size(dim);
  TORCH_CHECK(outer <= 65535, "this kernel supports at most 65535 leading rows, got ", outer);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape[dim] = 1;
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty(out_shape, x.options());
  if (y.numel() == 0) return y;
  const cudaError_t status = launch_sum_middle_dim(x.data_ptr<float>(), y.data_ptr<float>(), outer, reduce, inner,
                                                   at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "sum kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &sum_forward, "Sum over one dimension, keepdim (CUDA)", py::arg("x"), py::arg("dim"));
}
