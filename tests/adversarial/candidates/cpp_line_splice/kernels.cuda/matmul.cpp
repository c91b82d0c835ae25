// SPDX-License-Identifier: Apache-2.0
// "at::cuda::mm" split by a backslash-newline inside "at": the compiler joins the two
// lines before it reads a token, a line-by-line scan sees "a" and "t::cuda::mm".
#include <torch/extension.h>

#include <ATen/CUDAFunctions.h>

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  return a\
t::cuda::mm(a, b);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul); }
