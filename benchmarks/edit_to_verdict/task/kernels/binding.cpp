#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

void launch_swish(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor swish(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "swish expects a contiguous float32 CUDA tensor");
  torch::Tensor y = torch::empty_like(x);
  launch_swish(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("swish", &swish, "y = x * sigmoid(x)"); }
