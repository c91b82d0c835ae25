#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>  // vector

int64_t max_pool1d_output_length(int64_t length, int kernel_size, int stride, int padding, int dilation);
cudaError_t launch_max_pool1d(const float* x, float* y, int64_t rows, int64_t length, int64_t out_length,
                              int kernel_size, int stride, int padding, int dilation, cudaStream_t stream);

namespace {

torch::Tensor max_pool1d_forward(const torch::Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding,
                                 int64_t dilation) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  TORCH_CHECK(x.dim() == 2 || x.dim() == 3, "x must be (C, L) or (N, C, L)");
  TORCH_CHECK(kernel_size > 0 && stride > 0 && dilation > 0, "kernel_size, stride and dilation must be positive");
  TORCH_CHECK(padding >= 0 && 2 * padding <= kernel_size, "padding must be at most half the kernel size");
  const int64_t length = x.size(-1);
  const int64_t out_length = max_pool1d_output_length(length, static_cast<int>(kernel_size), static_cast<int>(stride),
                                                      static_cast<int>(padding), static_cast<int>(dilation));
  TORCH_CHECK(out_length > 0, "the pooling window is larger than the padded input");
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = out_length;
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty(out_shape, x.options());
  if (y.numel() == 0) return y;
  const int64_t rows = x.numel() / length;
  TORCH_CHECK((rows * out_length + 255) / 256 <= INT32_MAX, "input too large");
  const cudaError_t status = launch_max_pool1d(
      x.data_ptr<float>(), y.data_ptr<float>(), rows, length, out_length, static_cast<int>(kernel_size),
      static_cast<int>(stride), static_cast<int>(padding), static_cast<int>(dilation), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "max_pool1d kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &max_pool1d_forward, "MaxPool1d (CUDA)", py::arg("x"), py::arg("kernel_size"), py::arg("stride"),
        py::arg("padding"), py::arg("dilation"));
}
