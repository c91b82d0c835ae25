#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cublas_v2.h>

#include <climits>  // INT_MAX
#include <cmath>    // sqrt
#include <vector>   // vector

cublasStatus_t linear_product(cublasHandle_t handle, cudaStream_t stream, const float* x, const float* weight, float* y,
                              int m, int n, int k);
bool layer_norm_rows_supports(int64_t cols);
cudaError_t launch_layer_norm_rows(const float* x, const float* weight, const float* bias, int64_t rows, int64_t cols,
                                   float eps, float* y, cudaStream_t stream);
cudaError_t launch_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_bias_new_gelu(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t launch_bias_residual(float* y, const float* bias, const float* residual, int64_t rows, int64_t cols,
                                 cudaStream_t stream);
bool causal_attention_supports(int head_dim);
cudaError_t launch_causal_attention(const float* qkv, float* y, int batch, int seq_len, int heads, float scale,
                                    cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

void check_launch(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, what, " launch failed: ", cudaGetErrorString(status));
}

struct Linear {
  const torch::Tensor& weight;
  const torch::Tensor& bias;
  const char* name;
};

// out = x @ weight^T (no bias: the epilogue adds it).
torch::Tensor product(const torch::Tensor& x, const Linear& layer, cudaStream_t stream) {
  TORCH_CHECK(layer.weight.dim() == 2 && layer.weight.size(1) == x.size(1) && layer.bias.numel() == layer.weight.size(0) &&
                  layer.weight.size(0) % 4 == 0 && layer.weight.size(0) <= INT_MAX,
              layer.name, ": weight ", layer.weight.sizes(), " does not take ", x.size(1), " features");
  torch::Tensor out = torch::empty({x.size(0), layer.weight.size(0)}, x.options());
  const cublasStatus_t status = linear_product(at::cuda::getCurrentCUDABlasHandle(), stream, x.data_ptr<float>(),
                                               layer.weight.data_ptr<float>(), out.data_ptr<float>(),
                                               static_cast<int>(x.size(0)), static_cast<int>(layer.weight.size(0)),
                                               static_cast<int>(x.size(1)));
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, layer.name, ": cublasSgemm failed: ", cublasGetStatusString(status));
  return out;
}

torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                         cudaStream_t stream) {
  TORCH_CHECK(weight.numel() == x.size(1) && bias.numel() == x.size(1), "LayerNorm parameters must have ", x.size(1),
              " elements");
  torch::Tensor y = torch::empty_like(x);
  check_launch(launch_layer_norm_rows(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), x.size(0),
                                      x.size(1), static_cast<float>(eps), y.data_ptr<float>(), stream),
               "layer_norm kernel");
  return y;
}

// x + attn(ln_1(x)), then + mlp(ln_2(.)); dropout p = 0.
torch::Tensor block_forward(const torch::Tensor& x, int64_t heads, const std::vector<torch::Tensor>& norms,
                            const std::vector<torch::Tensor>& linears, double eps) {
  check_float_cuda(x, "x");
  TORCH_CHECK(norms.size() == 4 && linears.size() == 8, "expected 4 LayerNorm and 8 Linear tensors");
  for (const torch::Tensor& t : norms) check_float_cuda(t, "LayerNorm parameter");
  for (const torch::Tensor& t : linears) check_float_cuda(t, "Linear parameter");
  TORCH_CHECK(x.dim() == 3, "x must be (B, T, C), got ", x.sizes());
  const int64_t batch = x.size(0), seq_len = x.size(1), embed = x.size(2);
  TORCH_CHECK(heads > 0 && embed % heads == 0 && causal_attention_supports(static_cast<int>(embed / heads)),
              "this kernel needs a head size of 96, got n_embd ", embed, " / n_head ", heads);
  TORCH_CHECK(layer_norm_rows_supports(embed), "n_embd must be a multiple of 4 and at most 1024, got ", embed);
  TORCH_CHECK(batch * seq_len <= INT_MAX && batch <= 65535, "input too large");
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t rows = batch * seq_len;
  const torch::Tensor tokens = x.view({rows, embed});  // metadata only

  const torch::Tensor normed_1 = layer_norm(tokens, norms[0], norms[1], eps, stream);
  torch::Tensor qkv = product(normed_1, {linears[0], linears[1], "attn.c_attn"}, stream);
  check_launch(launch_bias(qkv.data_ptr<float>(), linears[1].data_ptr<float>(), rows, 3 * embed, stream),
               "c_attn bias kernel");
  torch::Tensor attended = torch::empty({rows, embed}, x.options());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(embed / heads)));
  check_launch(launch_causal_attention(qkv.data_ptr<float>(), attended.data_ptr<float>(), static_cast<int>(batch),
                                       static_cast<int>(seq_len), static_cast<int>(heads), scale, stream),
               "causal attention kernel");
  torch::Tensor hidden = product(attended, {linears[2], linears[3], "attn.c_proj"}, stream);
  check_launch(launch_bias_residual(hidden.data_ptr<float>(), linears[3].data_ptr<float>(), tokens.data_ptr<float>(),
                                    rows, embed, stream),
               "c_proj bias+residual kernel");

  const torch::Tensor normed_2 = layer_norm(hidden, norms[2], norms[3], eps, stream);
  torch::Tensor expanded = product(normed_2, {linears[4], linears[5], "mlp.c_fc"}, stream);
  check_launch(launch_bias_new_gelu(expanded.data_ptr<float>(), linears[5].data_ptr<float>(), rows, 4 * embed, stream),
               "c_fc bias+gelu kernel");
  torch::Tensor out = product(expanded, {linears[6], linears[7], "mlp.c_proj"}, stream);
  check_launch(launch_bias_residual(out.data_ptr<float>(), linears[7].data_ptr<float>(), hidden.data_ptr<float>(), rows,
                                    embed, stream),
               "mlp c_proj bias+residual kernel");
  return out.view({batch, seq_len, embed});
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &block_forward, "GPT block forward (cuBLAS + fused CUDA kernels)", py::arg("x"), py::arg("n_head"),
        py::arg("norms"), py::arg("linears"), py::arg("eps"));
}
