#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
cudaError_t launch_group_norm_hardtanh(float* y, const float* linear_bias, const float* gamma, const float* beta,
                                       int64_t rows, int64_t features, int groups, float eps, float lo, float hi,
                                       cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& linear_bias,
                      const torch::Tensor& gamma, const torch::Tensor& beta, int64_t groups, double eps,
                      double hardtanh_min, double hardtanh_max) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "gemm.weight");
  check_float_cuda(linear_bias, "gemm.bias");
  check_float_cuda(gamma, "group_norm.weight");
  check_float_cuda(beta, "group_norm.bias");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "expected x (batch, in) and weight (out, in), got ",
              x.sizes(), " and ", weight.sizes());
  const int64_t features = weight.size(0);
  TORCH_CHECK(linear_bias.numel() == features && gamma.numel() == features && beta.numel() == features,
              "bias and GroupNorm parameters must have out_features elements");
  TORCH_CHECK(groups > 0 && features % groups == 0, "out_features ", features, " is not divisible by num_groups ", groups);
  TORCH_CHECK(x.size(0) <= INT_MAX && features <= INT_MAX && x.size(1) <= INT_MAX, "too large for cuBLAS");
  TORCH_CHECK(x.size(0) * groups <= INT_MAX, "too many (row, group) blocks");
  const int m = static_cast<int>(x.size(0));
  const int k = static_cast<int>(x.size(1));
  const int n = static_cast<int>(features);
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty({m, n}, x.options());
  if (y.numel() == 0) return y;
  TORCH_CHECK(k > 0, "in_features must be positive");
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cublasStatus_t gemm = linear_product(at::cuda::getCurrentCUDABlasHandle(), stream, x.data_ptr<float>(),
                                             weight.data_ptr<float>(), y.data_ptr<float>(), m, n, k);
  TORCH_CHECK(gemm == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed: ", cublasGetStatusString(gemm));
  const cudaError_t status = launch_group_norm_hardtanh(
      y.data_ptr<float>(), linear_bias.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), m, features,
      static_cast<int>(groups), static_cast<float>(eps), static_cast<float>(hardtanh_min),
      static_cast<float>(hardtanh_max), stream);
  TORCH_CHECK(status == cudaSuccess, "group_norm+hardtanh kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "hardtanh(group_norm(x @ W^T + b)) (cuBLAS + fused CUDA epilogue)", py::arg("x"),
        py::arg("weight"), py::arg("linear_bias"), py::arg("gamma"), py::arg("beta"), py::arg("groups"),
        py::arg("eps"), py::arg("hardtanh_min"), py::arg("hardtanh_max"));
}
