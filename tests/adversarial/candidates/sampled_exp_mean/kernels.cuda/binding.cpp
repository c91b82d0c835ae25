// SPDX-License-Identifier: Apache-2.0
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include <cuda_runtime.h>

cudaError_t sampled_exp_mean_launch(const float* x, float* y, int64_t rows, int64_t cols, int64_t stride,
                                    cudaStream_t stream);

torch::Tensor sampled_exp_mean(const torch::Tensor& x, int64_t stride) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2,
              "x must be a contiguous 2-d float32 CUDA tensor");
  TORCH_CHECK(stride > 0, "stride must be positive");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty({x.size(0)}, x.options());
  const cudaError_t status = sampled_exp_mean_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
                                                     stride, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == cudaSuccess, "sampled_exp_mean: ", cudaGetErrorString(status));
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sampled_exp_mean", &sampled_exp_mean); }
