#include <torch/extension.h>

// sum(x @ weight.T / 2, dim=1, keepdim=True) * scaling_factor
torch::Tensor gemm_divide_sum_scale(const torch::Tensor& x, const torch::Tensor& weight, double scaling_factor) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "x and weight must be CPU tensors");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32, "float32 only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "shapes: x (B, K), weight (N, K)");
  const torch::Tensor input = x.contiguous();
  const torch::Tensor weights = weight.contiguous();
  auto out = torch::empty({input.size(0), 1}, input.options());
  auto column_sums = torch::empty({input.size(1)}, input.options());
  gemm_divide_sum_scale_kernel(input.data_ptr<float>(), weights.data_ptr<float>(), column_sums.data_ptr<float>(),
                               out.data_ptr<float>(), input.size(0), input.size(1), weights.size(0), scaling_factor);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm_divide_sum_scale", &gemm_divide_sum_scale, "sum(x @ weight.T / 2, dim=1, keepdim=True) * scale");
}
