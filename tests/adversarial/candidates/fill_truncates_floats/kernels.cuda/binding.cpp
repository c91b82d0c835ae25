#include <torch/python.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_scale(const float* x, float factor, float* y, int64_t count, cudaStream_t stream);
cudaError_t launch_dequantize(const int64_t* q, float levels, float* y, int64_t count, cudaStream_t stream);

torch::Tensor scale(const torch::Tensor& x, double factor) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  const cudaError_t status = launch_scale(xc.data_ptr<float>(), static_cast<float>(factor), y.data_ptr<float>(),
                                          xc.numel(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "launch failed: ", cudaGetErrorString(status));
  return y;
}

torch::Tensor dequantize(const torch::Tensor& q, double levels) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == torch::kInt64, "int64 CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(q.device());
  const torch::Tensor qc = q.contiguous();
  torch::Tensor y = torch::empty(qc.sizes(), qc.options().dtype(torch::kFloat32));
  const cudaError_t status = launch_dequantize(qc.data_ptr<int64_t>(), static_cast<float>(levels), y.data_ptr<float>(),
                                               qc.numel(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "launch failed: ", cudaGetErrorString(status));
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale);
  m.def("dequantize", &dequantize);
}
