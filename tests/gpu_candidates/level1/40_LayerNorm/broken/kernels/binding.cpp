#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cuda_runtime.h>

int layer_norm_chunks(int64_t row_size);
cudaError_t launch_layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t rows,
                              int64_t row_size, float2* scratch, float* y, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

torch::Tensor layer_norm_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  check_float_cuda(bias, "bias");
  TORCH_CHECK(weight.sizes() == bias.sizes(), "weight and bias shapes differ");
  const int64_t row_size = x.size(-1);
  TORCH_CHECK(x.dim() >= weight.dim() && x.sizes().slice(x.dim() - weight.dim()) == weight.sizes(),
              "x's trailing dimensions ", x.sizes(), " must equal normalized_shape ", weight.sizes());
  TORCH_CHECK(row_size % 4 == 0, "this kernel needs the normalized size to be a multiple of 4, got ", row_size);
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / row_size;
  const int chunks = layer_norm_chunks(row_size);
  TORCH_CHECK(rows * chunks <= INT32_MAX, "too many rows: ", rows);
  torch::Tensor scratch = torch::empty({rows * (chunks + 1) * 2}, x.options());
  const cudaError_t status = launch_layer_norm(
      x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), static_cast<float>(eps), rows, row_size,
      reinterpret_cast<float2*>(scratch.data_ptr<float>()), y.data_ptr<float>(), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == cudaSuccess, "layer_norm kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &layer_norm_forward, "LayerNorm with affine (CUDA)", py::arg("x"), py::arg("weight"),
        py::arg("bias"), py::arg("eps"));
}
