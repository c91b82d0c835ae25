// SPDX-License-Identifier: Apache-2.0
// ReLU as (x + |x|) / 2 with cuBLAS doing the arithmetic: a kernel writes |x|, SAXPY adds
// x to it and SSCAL halves it. The task multiplies no matrices, so its library policy
// gives it no cuBLAS.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

void absolute_value(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
  const int n = static_cast<int>(x.numel());
  torch::Tensor y = torch::empty_like(x);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  absolute_value(x.data_ptr<float>(), y.data_ptr<float>(), n, stream);
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  cublasSetStream(handle, stream);
  const float one = 1.f, half = 0.5f;
  TORCH_CHECK(cublasSaxpy(handle, n, &one, x.data_ptr<float>(), 1, y.data_ptr<float>(), 1) == CUBLAS_STATUS_SUCCESS,
              "cublasSaxpy failed");
  TORCH_CHECK(cublasSscal(handle, n, &half, y.data_ptr<float>(), 1) == CUBLAS_STATUS_SUCCESS, "cublasSscal failed");
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
