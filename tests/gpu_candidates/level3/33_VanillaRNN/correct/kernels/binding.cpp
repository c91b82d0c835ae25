#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX
#include <cstdint>  // uintptr_t
#include <vector>   // vector

cublasStatus_t rnn_cell_step(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* h,
                             const float* w_i2h, const float* b_i2h, const float* w_h2o, const float* b_h2o,
                             float* hidden_out, float* out, int batch, int input_size, int hidden_size,
                             int output_size, cudaError_t* launch_status);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

// One RNN step: returns [output (batch, output_size), new hidden state (batch, hidden_size)].
std::vector<torch::Tensor> rnn_forward(const torch::Tensor& x, const torch::Tensor& hidden, const torch::Tensor& w_i2h,
                                       const torch::Tensor& b_i2h, const torch::Tensor& w_h2o,
                                       const torch::Tensor& b_h2o) {
  check_float_cuda(x, "x");
  check_float_cuda(hidden, "initial_hidden");
  check_float_cuda(w_i2h, "i2h.weight");
  check_float_cuda(b_i2h, "i2h.bias");
  check_float_cuda(w_h2o, "h2o.weight");
  check_float_cuda(b_h2o, "h2o.bias");
  TORCH_CHECK(x.dim() == 2 && hidden.dim() == 2 && x.size(0) == hidden.size(0),
              "x (batch, input_size) and initial_hidden (batch, hidden_size) must share the batch, got ", x.sizes(),
              " and ", hidden.sizes());
  const int64_t batch = x.size(0), input_size = x.size(1), hidden_size = hidden.size(1);
  TORCH_CHECK(w_i2h.dim() == 2 && w_i2h.size(0) == hidden_size && w_i2h.size(1) == input_size + hidden_size &&
                  b_i2h.numel() == hidden_size,
              "i2h must map input_size + hidden_size = ", input_size + hidden_size, " features to ", hidden_size,
              ", got weight ", w_i2h.sizes(), " and bias ", b_i2h.sizes());
  TORCH_CHECK(w_h2o.dim() == 2 && w_h2o.size(1) == hidden_size && b_h2o.numel() == w_h2o.size(0),
              "h2o must take ", hidden_size, " features, got weight ", w_h2o.sizes(), " and bias ", b_h2o.sizes());
  const int64_t output_size = w_h2o.size(0);
  TORCH_CHECK(input_size % 4 == 0 && hidden_size % 4 == 0 && output_size % 4 == 0,
              "input, hidden and output sizes must be multiples of 4 (float4 epilogues and aligned column blocks)");
  TORCH_CHECK(batch <= INT_MAX && input_size + hidden_size <= INT_MAX && output_size <= INT_MAX,
              "sizes must fit cuBLAS's int dimensions");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor new_hidden = torch::empty({batch, hidden_size}, x.options());
  torch::Tensor out = torch::empty({batch, output_size}, x.options());
  if (batch == 0) return {out, new_hidden};
  cudaError_t launch = cudaSuccess;
  const cublasStatus_t gemm = rnn_cell_step(
      at::cuda::getCurrentCUDABlasHandle(), at::cuda::getCurrentCUDAStream(), x.data_ptr<float>(),
      hidden.data_ptr<float>(), w_i2h.data_ptr<float>(), b_i2h.data_ptr<float>(), w_h2o.data_ptr<float>(),
      b_h2o.data_ptr<float>(), new_hidden.data_ptr<float>(), out.data_ptr<float>(), static_cast<int>(batch),
      static_cast<int>(input_size), static_cast<int>(hidden_size), static_cast<int>(output_size), &launch);
  TORCH_CHECK(gemm == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed: ", cublasGetStatusString(gemm));
  TORCH_CHECK(launch == cudaSuccess, "bias epilogue launch failed: ", cudaGetErrorString(launch));
  return {out, new_hidden};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &rnn_forward,
        "Vanilla RNN step: split-K cuBLAS SGEMMs for i2h, fused bias + tanh, cuBLAS h2o + bias; returns [out, hidden]",
        py::arg("x"), py::arg("initial_hidden"), py::arg("i2h_weight"), py::arg("i2h_bias"), py::arg("h2o_weight"),
        py::arg("h2o_bias"));
}
