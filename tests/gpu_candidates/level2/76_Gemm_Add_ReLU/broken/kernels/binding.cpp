#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
cudaError_t launch_bias_relu(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

torch::Tensor gemm_add_relu_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  check_float_cuda(bias, "bias");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1, "expected x (batch, in), weight (out, in), bias (out,)");
  TORCH_CHECK(x.size(1) == weight.size(1) && bias.size(0) == weight.size(0), "shape mismatch: x ", x.sizes(),
              ", weight ", weight.sizes(), ", bias ", bias.sizes());
  TORCH_CHECK(x.size(0) <= INT_MAX && weight.size(0) <= INT_MAX && weight.size(1) <= INT_MAX, "too large for cuBLAS");
  const int m = static_cast<int>(x.size(0));
  const int k = static_cast<int>(x.size(1));
  const int n = static_cast<int>(weight.size(0));
  TORCH_CHECK(n % 4 == 0, "out_features must be a multiple of 4 for the vectorized epilogue, got ", n);
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty({m, n}, x.options());
  if (y.numel() == 0) return y;
  TORCH_CHECK(k > 0, "in_features must be positive");
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cublasStatus_t gemm = linear_product(at::cuda::getCurrentCUDABlasHandle(), stream, x.data_ptr<float>(),
                                             weight.data_ptr<float>(), y.data_ptr<float>(), m, n, k);
  TORCH_CHECK(gemm == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed: ", cublasGetStatusString(gemm));
  const cudaError_t status = launch_bias_relu(y.data_ptr<float>(), bias.data_ptr<float>(), m, n, stream);
  TORCH_CHECK(status == cudaSuccess, "bias+relu kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &gemm_add_relu_forward, "relu(x @ W^T + bias) (cuBLAS + CUDA epilogue)", py::arg("x"),
        py::arg("weight"), py::arg("bias"));
}
