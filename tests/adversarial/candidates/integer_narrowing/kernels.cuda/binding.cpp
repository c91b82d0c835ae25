#include <torch/python.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

cudaError_t launch_widen(const uint8_t* in, int64_t* out, int64_t count, cudaStream_t stream);

torch::Tensor widen(const torch::Tensor& bytes) {
  TORCH_CHECK(bytes.is_cuda() && bytes.scalar_type() == torch::kUInt8, "uint8 CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(bytes.device());
  const torch::Tensor bc = bytes.contiguous();
  torch::Tensor out = torch::empty(bc.sizes(), bc.options().dtype(torch::kInt64));
  const cudaError_t status =
      launch_widen(bc.data_ptr<uint8_t>(), out.data_ptr<int64_t>(), bc.numel(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "launch failed: ", cudaGetErrorString(status));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("widen", &widen); }
