// Row-major C[m,n] = A[m,k] @ B[k,n] through cuBLAS, which is column-major: the row-major
// buffers of A, B and C are the column-major matrices A^T, B^T and C^T, and
// C^T = B^T A^T, so B goes first.
#include <cublas_v2.h>
#include <cuda_runtime.h>

cublasStatus_t matmul_row_major(cublasHandle_t handle, cudaStream_t stream, const float* a, const float* b, float* c,
                                int m, int n, int k) {
  if (cublasStatus_t status = cublasSetStream(handle, stream); status != CUBLAS_STATUS_SUCCESS) return status;
  const float alpha = 1.f;
  const float beta = 0.f;
  return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, a, k, b, n, &beta, c, n);
}
