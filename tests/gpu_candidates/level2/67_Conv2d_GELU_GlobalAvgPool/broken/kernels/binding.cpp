#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <climits>  // INT_MAX

bool conv_gelu_pool_supports(int out_channels, int kernel_h, int kernel_w);
int64_t conv_gelu_pool_partial_count(int64_t batch);
cudaError_t launch_conv_gelu_pool(const float* x, const float* weight, const float* bias, float* partials, float* out,
                                  int batch, int in_channels, int height, int width, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "conv.weight");
  check_float_cuda(bias, "conv.bias");
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1) && bias.numel() == weight.size(0),
              "expected x (N, C, H, W), weight (K, C, R, S), bias (K,), got ", x.sizes(), ", ", weight.sizes(), ", ",
              bias.sizes());
  TORCH_CHECK(conv_gelu_pool_supports(static_cast<int>(weight.size(0)), static_cast<int>(weight.size(2)),
                                      static_cast<int>(weight.size(3))),
              "this kernel is specialised for 64 output channels and a 3x3 kernel, got weight ", weight.sizes());
  TORCH_CHECK(x.size(2) >= 3 && x.size(3) >= 3, "input smaller than the kernel");
  TORCH_CHECK(x.size(0) <= 65535 && x.size(1) * x.size(2) * x.size(3) <= INT_MAX, "input too large");
  const int batch = static_cast<int>(x.size(0));
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor out = torch::empty({batch, weight.size(0)}, x.options());
  if (out.numel() == 0) return out;
  torch::Tensor partials = torch::empty({conv_gelu_pool_partial_count(batch)}, x.options());
  const cudaError_t status = launch_conv_gelu_pool(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), partials.data_ptr<float>(),
      out.data_ptr<float>(), batch, static_cast<int>(x.size(1)), static_cast<int>(x.size(2)),
      static_cast<int>(x.size(3)), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "conv+gelu+avgpool kernel launch failed: ", cudaGetErrorString(status));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "mean_hw(gelu(conv2d(x) + b)) (fused CUDA)", py::arg("x"), py::arg("weight"),
        py::arg("bias"));
}
