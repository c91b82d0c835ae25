#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
cudaError_t launch_bias_sigmoid(float* h, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_bias_logsumexp(const float* z, const float* bias, int64_t rows, int64_t cols, float* out,
                                  cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

void check_cublas(cublasStatus_t status, const char* what) {
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, what, " failed: ", cublasGetStatusString(status));
}

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, what, " launch failed: ", cudaGetErrorString(status));
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
                      const torch::Tensor& b2) {
  check_float_cuda(x, "x");
  check_float_cuda(w1, "linear1.weight");
  check_float_cuda(b1, "linear1.bias");
  check_float_cuda(w2, "linear2.weight");
  check_float_cuda(b2, "linear2.bias");
  TORCH_CHECK(x.dim() == 2 && w1.dim() == 2 && w2.dim() == 2, "expected 2-D x and weights");
  TORCH_CHECK(x.size(1) == w1.size(1) && w2.size(1) == w1.size(0) && b1.numel() == w1.size(0) &&
                  b2.numel() == w2.size(0),
              "shape mismatch: x ", x.sizes(), ", linear1 ", w1.sizes(), ", linear2 ", w2.sizes());
  TORCH_CHECK(x.size(0) <= INT_MAX && x.size(1) <= INT_MAX && w1.size(0) <= INT_MAX && w2.size(0) <= INT_MAX,
              "too large for cuBLAS");
  const int m = static_cast<int>(x.size(0));
  const int k = static_cast<int>(x.size(1));
  const int hidden = static_cast<int>(w1.size(0));
  const int n = static_cast<int>(w2.size(0));
  TORCH_CHECK(hidden % 4 == 0, "hidden_size must be a multiple of 4, got ", hidden);
  TORCH_CHECK(k > 0 && hidden > 0 && n > 0, "empty layer");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor out = torch::empty({m}, x.options());
  if (m == 0) return out;
  torch::Tensor h = torch::empty({m, hidden}, x.options());
  torch::Tensor z = torch::empty({m, n}, x.options());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  check_cublas(linear_product(handle, stream, x.data_ptr<float>(), w1.data_ptr<float>(), h.data_ptr<float>(), m, hidden, k),
               "cublasSgemm (linear1)");
  check_launch(launch_bias_sigmoid(h.data_ptr<float>(), b1.data_ptr<float>(), m, hidden, stream), "bias+sigmoid kernel");
  check_cublas(linear_product(handle, stream, h.data_ptr<float>(), w2.data_ptr<float>(), z.data_ptr<float>(), m, n, hidden),
               "cublasSgemm (linear2)");
  check_launch(launch_bias_logsumexp(z.data_ptr<float>(), b2.data_ptr<float>(), m, n, out.data_ptr<float>(), stream),
               "bias+logsumexp kernel");
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "logsumexp(linear2(sigmoid(linear1(x))), dim=1) (cuBLAS + fused CUDA epilogues)",
        py::arg("x"), py::arg("w1"), py::arg("b1"), py::arg("w2"), py::arg("b2"));
}
