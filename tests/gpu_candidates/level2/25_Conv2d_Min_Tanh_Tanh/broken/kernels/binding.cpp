#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <climits>  // INT_MAX

bool conv_min_tanh_supports(int out_channels, int kernel_h, int kernel_w);
cudaError_t launch_conv_min_tanh(const float* x, const float* weight, const float* bias, float* y, int batch,
                                 int in_channels, int height, int width, cudaStream_t stream);

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
  TORCH_CHECK(conv_min_tanh_supports(static_cast<int>(weight.size(0)), static_cast<int>(weight.size(2)),
                                     static_cast<int>(weight.size(3))),
              "this kernel is specialised for 64 output channels and a 3x3 kernel, got weight ", weight.sizes());
  TORCH_CHECK(x.size(2) >= 3 && x.size(3) >= 3, "input smaller than the kernel");
  TORCH_CHECK(x.size(0) <= 65535 && x.size(1) * x.size(2) * x.size(3) <= INT_MAX, "input too large");
  const int batch = static_cast<int>(x.size(0));
  const int height = static_cast<int>(x.size(2));
  const int width = static_cast<int>(x.size(3));
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty({batch, 1, height - 2, width - 2}, x.options());
  if (y.numel() == 0) return y;
  const cudaError_t status =
      launch_conv_min_tanh(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                           batch, static_cast<int>(x.size(1)), height, width, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "conv+min+tanh kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "tanh(tanh(min_c(conv2d(x) + b))) (fused CUDA)", py::arg("x"), py::arg("weight"),
        py::arg("bias"));
}
