#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX
#include <cmath>    // sqrt

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
cudaError_t launch_bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, bool relu,
                                   cudaStream_t stream);
bool relu_attention_supports(int head_dim);
cudaError_t launch_relu_attention(const float* qkv, float* y, int batch, int seq_len, int heads, float scale,
                                  cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

torch::Tensor relu_self_attention_forward(const torch::Tensor& x, const torch::Tensor& attn_weight,
                                          const torch::Tensor& attn_bias, int64_t heads) {
  check_float_cuda(x, "x");
  check_float_cuda(attn_weight, "c_attn.weight");
  check_float_cuda(attn_bias, "c_attn.bias");
  TORCH_CHECK(x.dim() == 3, "x must be (B, T, C), got ", x.sizes());
  const int64_t batch = x.size(0), seq_len = x.size(1), embed = x.size(2);
  TORCH_CHECK(heads > 0 && embed % heads == 0, "n_embd ", embed, " is not divisible by n_head ", heads);
  TORCH_CHECK(relu_attention_supports(static_cast<int>(embed / heads)), "this kernel needs a head size of 64, got ",
              embed / heads);
  TORCH_CHECK(attn_weight.dim() == 2 && attn_weight.size(0) == 3 * embed && attn_weight.size(1) == embed &&
                  attn_bias.numel() == 3 * embed,
              "c_attn must map ", embed, " to ", 3 * embed, " features, got weight ", attn_weight.sizes());
  TORCH_CHECK(batch * seq_len <= INT_MAX && batch <= 65535 && 3 * embed <= INT_MAX, "input too large");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty({batch, seq_len, embed}, x.options());
  if (y.numel() == 0) return y;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int rows = static_cast<int>(batch * seq_len);
  torch::Tensor qkv = torch::empty({rows, 3 * embed}, x.options());
  const cublasStatus_t gemm =
      linear_product(at::cuda::getCurrentCUDABlasHandle(), stream, x.data_ptr<float>(), attn_weight.data_ptr<float>(),
                     qkv.data_ptr<float>(), rows, static_cast<int>(3 * embed), static_cast<int>(embed));
  TORCH_CHECK(gemm == CUBLAS_STATUS_SUCCESS, "c_attn cublasSgemm failed: ", cublasGetStatusString(gemm));
  cudaError_t status = launch_bias_activation(qkv.data_ptr<float>(), attn_bias.data_ptr<float>(), rows, 3 * embed,
                                              /*relu=*/false, stream);
  TORCH_CHECK(status == cudaSuccess, "c_attn bias kernel launch failed: ", cudaGetErrorString(status));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(embed / heads)));
  status = launch_relu_attention(qkv.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(batch),
                                 static_cast<int>(seq_len), static_cast<int>(heads), scale, stream);
  TORCH_CHECK(status == cudaSuccess, "relu attention kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &relu_self_attention_forward, "causal ReLU self-attention (cuBLAS + fused CUDA kernel)",
        py::arg("x"), py::arg("attn_weight"), py::arg("attn_bias"), py::arg("n_head"));
}
