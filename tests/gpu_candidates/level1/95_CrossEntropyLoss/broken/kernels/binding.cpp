#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cuda_runtime.h>

int64_t cross_entropy_partial_count(int64_t rows);
cudaError_t launch_cross_entropy(const float* logits, const int64_t* targets, int64_t rows, int64_t classes,
                                 float2* partials, float* out, cudaStream_t stream);

namespace {

torch::Tensor cross_entropy_forward(const torch::Tensor& predictions, const torch::Tensor& targets) {
  TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "predictions and targets must be CUDA tensors");
  TORCH_CHECK(predictions.scalar_type() == torch::kFloat32, "predictions must be float32, got ",
              predictions.scalar_type());
  TORCH_CHECK(targets.scalar_type() == torch::kInt64, "targets must be int64 class indices, got ",
              targets.scalar_type());
  TORCH_CHECK(predictions.dim() == 2 && targets.dim() == 1 && targets.size(0) == predictions.size(0),
              "expected predictions (batch, classes) and targets (batch,), got ", predictions.sizes(), " and ",
              targets.sizes());
  TORCH_CHECK(predictions.is_contiguous() && targets.is_contiguous(), "inputs must be contiguous");
  const c10::cuda::CUDAGuard guard(predictions.device());
  const int64_t rows = predictions.size(0);
  const int64_t classes = predictions.size(1);
  TORCH_CHECK(rows > 0 && classes > 0, "empty input");
  torch::Tensor out = torch::empty({}, predictions.options());
  const int64_t partial_count = cross_entropy_partial_count(rows);
  torch::Tensor partials = torch::empty({partial_count * 2}, predictions.options());
  const cudaError_t status = launch_cross_entropy(
      predictions.data_ptr<float>(), targets.data_ptr<int64_t>(), rows, classes,
      reinterpret_cast<float2*>(partials.data_ptr<float>()), out.data_ptr<float>(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "cross_entropy kernel launch failed: ", cudaGetErrorString(status));
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &cross_entropy_forward, "Mean cross-entropy loss (CUDA)", py::arg("predictions"),
        py::arg("targets"));
}
