#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX
#include <vector>   // vector

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
cudaError_t launch_bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, bool relu,
                                   cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name, size_t index) {
  TORCH_CHECK(t.is_cuda(), name, "[", index, "] must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, "[", index, "] must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, "[", index, "] must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, "[", index, "] must be 16-byte aligned");
}

// Linear layers with ReLU between them (not after the last one).
torch::Tensor mlp_forward(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                          const std::vector<torch::Tensor>& biases) {
  TORCH_CHECK(!weights.empty() && weights.size() == biases.size(), "need as many biases as weights, and at least one");
  check_float_cuda(x, "x", 0);
  TORCH_CHECK(x.dim() == 2 && x.size(0) <= INT_MAX, "x must be (batch, features)");
  int64_t features = x.size(1);
  for (size_t layer = 0; layer < weights.size(); ++layer) {
    check_float_cuda(weights[layer], "weights", layer);
    check_float_cuda(biases[layer], "biases", layer);
    TORCH_CHECK(weights[layer].dim() == 2 && weights[layer].size(1) == features &&
                    biases[layer].numel() == weights[layer].size(0),
                "layer ", layer, ": weight ", weights[layer].sizes(), " and bias ", biases[layer].sizes(),
                " do not take ", features, " input features");
    TORCH_CHECK(weights[layer].size(0) % 4 == 0 && weights[layer].size(0) <= INT_MAX && features <= INT_MAX,
                "layer ", layer, ": out_features must be a multiple of 4 that fits cuBLAS");
    features = weights[layer].size(0);
  }
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const int m = static_cast<int>(x.size(0));
  torch::Tensor activation = x;
  for (size_t layer = 0; layer < weights.size(); ++layer) {
    const int k = static_cast<int>(weights[layer].size(1));
    const int n = static_cast<int>(weights[layer].size(0));
    torch::Tensor out = torch::empty({m, n}, x.options());
    if (out.numel() == 0) return out;
    const cublasStatus_t gemm = linear_product(handle, stream, activation.data_ptr<float>(),
                                               weights[layer].data_ptr<float>(), out.data_ptr<float>(), m, n, k);
    TORCH_CHECK(gemm == CUBLAS_STATUS_SUCCESS, "layer ", layer, ": cublasSgemm failed: ", cublasGetStatusString(gemm));
    const bool relu = layer < weights.size();
    const cudaError_t status = launch_bias_activation(out.data_ptr<float>(), biases[layer].data_ptr<float>(), m, n, relu,
                                                      stream);
    TORCH_CHECK(status == cudaSuccess, "layer ", layer, ": bias kernel launch failed: ", cudaGetErrorString(status));
    activation = out;
  }
  return activation;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &mlp_forward, "MLP: Linear (+ReLU) layers (cuBLAS + fused CUDA epilogues)", py::arg("x"),
        py::arg("weights"), py::arg("biases"));
}
