#include <torch/python.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_set_value(float* out, float value, cudaStream_t stream);

// A 0-dim float32 tensor on `like`'s device holding `value`.
torch::Tensor scalar_like(const torch::Tensor& like, double value) {
  TORCH_CHECK(like.is_cuda(), "CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(like.device());
  torch::Tensor out = torch::empty({}, like.options().dtype(torch::kFloat32));
  const cudaError_t status =
      launch_set_value(out.data_ptr<float>(), static_cast<float>(value), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "launch failed: ", cudaGetErrorString(status));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scalar_like", &scalar_like); }
