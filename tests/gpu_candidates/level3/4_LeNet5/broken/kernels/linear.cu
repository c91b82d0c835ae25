// nn.Linear's product through cuBLAS. Row-major Y[m,n] = X[m,k] @ W[n,k]^T is, in cuBLAS's
// column-major terms, Y^T (n x m) = W (n x k, the row-major W buffer read transposed) @ X^T.
#include <cublas_v2.h>
#include <cuda_runtime.h>

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k) {
  if (cublasStatus_t status = cublasSetStream(handle, stream); status != CUBLAS_STATUS_SUCCESS) return status;
  const float alpha = 1.f;
  const float beta = 0.f;
  return cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, weight, k, x, k, &beta, y, n);
}
