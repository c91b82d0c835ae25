#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

cudaError_t launch_gemm_divide_sum_scale(const float* x, const float* weight, float* workspace, float* out,
                                         int batch, int in_features, int hidden, float factor,
                                         cudaStream_t stream);

// sum(x @ weight.T / 2, dim=1, keepdim=True) * scaling_factor
torch::Tensor gemm_divide_sum_scale(const torch::Tensor& x, const torch::Tensor& weight, double scaling_factor) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "x and weight must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32, "float32 only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "shapes: x (B, K), weight (N, K)");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous(), "x and weight must be contiguous");
  const int batch = static_cast<int>(x.size(0));
  const int in_features = static_cast<int>(x.size(1));
  const int hidden = static_cast<int>(weight.size(0));
  auto out = torch::empty({batch, 1}, x.options());
  auto workspace = torch::empty({in_features}, x.options());
  const cudaError_t status = launch_gemm_divide_sum_scale(
      x.data_ptr<float>(), weight.data_ptr<float>(), workspace.data_ptr<float>(), out.data_ptr<float>(), batch,
      in_features, hidden, static_cast<float>(scaling_factor), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(status));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm_divide_sum_scale", &gemm_divide_sum_scale, "sum(x @ weight.T / 2, dim=1, keepdim=True) * scale");
}
