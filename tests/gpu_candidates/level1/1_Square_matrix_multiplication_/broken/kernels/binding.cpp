#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX

cublasStatus_t matmul_row_major(cublasHandle_t handle, cudaStream_t stream, const float* a, const float* b, float* c,
                                int m, int n, int k);

namespace {

void check_matrix(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 2, name, " must be a matrix, got ", t.dim(), " dimensions");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.size(0) <= INT_MAX && t.size(1) <= INT_MAX, name, " is too large for cuBLAS");
}

torch::Tensor matmul_forward(const torch::Tensor& a, const torch::Tensor& b) {
  check_matrix(a, "A");
  check_matrix(b, "B");
  TORCH_CHECK(a.size(1) == b.size(0), "A is ", a.sizes(), " and B is ", b.sizes(), ": inner dimensions differ");
  const c10::cuda::CUDAGuard guard(a.device());
  const int m = static_cast<int>(a.size(0));
  const int k = static_cast<int>(a.size(1));
  const int n = static_cast<int>(b.size(1));
  torch::Tensor c = torch::empty({m, n}, a.options());
  if (c.numel() == 0) return c;
  TORCH_CHECK(k > 0, "empty inner dimension is not supported");
  const cublasStatus_t status =
      matmul_row_major(at::cuda::getCurrentCUDABlasHandle(), at::cuda::getCurrentCUDAStream(), a.data_ptr<float>(),
                       b.data_ptr<float>(), c.data_ptr<float>(), m, n, k);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed: ", cublasGetStatusString(status));
  return c;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &matmul_forward, "C = A @ B via cuBLAS SGEMM", py::arg("A"), py::arg("B"));
}
