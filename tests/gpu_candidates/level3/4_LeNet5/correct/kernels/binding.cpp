#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX
#include <vector>   // vector

bool conv_relu_pool_supports(int kernel_size);
cudaError_t launch_conv_relu_pool(const float* x, const float* weight, const float* bias, float* y, int batch,
                                  int in_channels, int height, int width, int out_channels, cudaStream_t stream);
cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
cudaError_t launch_bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, bool relu,
                                   cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, what, " launch failed: ", cudaGetErrorString(status));
}

// conv + bias + ReLU + 2x2 max-pool; returns (N, K, (H - 4) / 2, (W - 4) / 2).
torch::Tensor conv_relu_pool(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             cudaStream_t stream, const char* name) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(1) == x.size(1) && weight.size(2) == weight.size(3) &&
                  conv_relu_pool_supports(static_cast<int>(weight.size(2))) && bias.numel() == weight.size(0),
              name, ": expected a 5x5 kernel over ", x.size(1), " channels, got weight ", weight.sizes());
  TORCH_CHECK(x.size(2) >= 6 && x.size(3) >= 6, name, ": input too small");
  const int64_t pooled_h = (x.size(2) - 4) / 2;
  const int64_t pooled_w = (x.size(3) - 4) / 2;
  torch::Tensor y = torch::empty({x.size(0), weight.size(0), pooled_h, pooled_w}, x.options());
  if (y.numel() == 0) return y;
  check_launch(launch_conv_relu_pool(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                     y.data_ptr<float>(), static_cast<int>(x.size(0)), static_cast<int>(x.size(1)),
                                     static_cast<int>(x.size(2)), static_cast<int>(x.size(3)),
                                     static_cast<int>(weight.size(0)), stream),
               name);
  return y;
}

torch::Tensor lenet_forward(const torch::Tensor& x, const torch::Tensor& conv1_weight, const torch::Tensor& conv1_bias,
                            const torch::Tensor& conv2_weight, const torch::Tensor& conv2_bias,
                            const std::vector<torch::Tensor>& fc_weights, const std::vector<torch::Tensor>& fc_biases) {
  check_float_cuda(x, "x");
  check_float_cuda(conv1_weight, "conv1.weight");
  check_float_cuda(conv1_bias, "conv1.bias");
  check_float_cuda(conv2_weight, "conv2.weight");
  check_float_cuda(conv2_bias, "conv2.bias");
  TORCH_CHECK(x.dim() == 4 && x.size(0) <= INT_MAX && x.numel() / x.size(0) <= INT_MAX, "x must be (N, C, H, W)");
  TORCH_CHECK(fc_weights.size() == 3 && fc_biases.size() == 3, "expected three fully connected layers");
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const torch::Tensor pooled1 = conv_relu_pool(x, conv1_weight, conv1_bias, stream, "conv1+relu+pool");
  const torch::Tensor pooled2 = conv_relu_pool(pooled1, conv2_weight, conv2_bias, stream, "conv2+relu+pool");

  const int m = static_cast<int>(x.size(0));
  torch::Tensor activation = pooled2.view({m, -1});  // metadata only: NCHW is already (N, C*H*W)
  const cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  for (size_t layer = 0; layer < fc_weights.size(); ++layer) {
    const torch::Tensor& w = fc_weights[layer];
    const torch::Tensor& b = fc_biases[layer];
    check_float_cuda(w, "fc weight");
    check_float_cuda(b, "fc bias");
    TORCH_CHECK(w.dim() == 2 && w.size(1) == activation.size(1) && b.numel() == w.size(0) && w.size(0) % 4 == 0,
                "fc layer ", layer, ": weight ", w.sizes(), " does not take ", activation.size(1),
                " features (or its width is not a multiple of 4)");
    const int k = static_cast<int>(w.size(1));
    const int n = static_cast<int>(w.size(0));
    torch::Tensor out = torch::empty({m, n}, x.options());
    if (out.numel() == 0) return out;
    const cublasStatus_t gemm =
        linear_product(handle, stream, activation.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), m, n, k);
    TORCH_CHECK(gemm == CUBLAS_STATUS_SUCCESS, "fc layer ", layer, ": cublasSgemm failed: ", cublasGetStatusString(gemm));
    check_launch(launch_bias_activation(out.data_ptr<float>(), b.data_ptr<float>(), m, n, layer + 1 < fc_weights.size(),
                                        stream),
                 "fc bias kernel");
    activation = out;
  }
  return activation;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &lenet_forward, "LeNet-5 forward (fused CUDA conv/pool kernels + cuBLAS)", py::arg("x"),
        py::arg("conv1_weight"), py::arg("conv1_bias"), py::arg("conv2_weight"), py::arg("conv2_bias"),
        py::arg("fc_weights"), py::arg("fc_biases"));
}
