// SPDX-License-Identifier: Apache-2.0
// CPU kernels shared by the candidates of the adversarial suite: correct implementations
// of the suite's tasks, and the deliberate defects the exploits are made of. One build
// serves every candidate (the compile driver's object cache keys objects by content), so
// candidates differ only in model_new.py.
#include <torch/extension.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <stdexcept>
#include <vector>

namespace toolbox {

void expect_float(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// C = A (n x k) B (k x m), row-major.
void gemm(const float* a, const float* b, float* c, int64_t n, int64_t k, int64_t m) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = c + i * m;
    for (int64_t j = 0; j < m; ++j) row[j] = 0.f;
    for (int64_t p = 0; p < k; ++p) {
      const float scale = a[i * k + p];
      const float* brow = b + p * m;
      for (int64_t j = 0; j < m; ++j) row[j] += scale * brow[j];
    }
  }
}

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  expect_float(a, "a");
  expect_float(b, "b");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul: shapes do not chain");
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  gemm(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1), b.size(1));
  return c;
}

void matmul_into(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c) {
  expect_float(c, "out");
  gemm(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1), b.size(1));
}

// Blocked over k and m: a different summation grouping than gemm(), same result within
// rounding.
torch::Tensor matmul_tiled(const torch::Tensor& a, const torch::Tensor& b) {
  expect_float(a, "a");
  expect_float(b, "b");
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  torch::Tensor c = torch::zeros({n, m}, a.options());
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* pc = c.data_ptr<float>();
  constexpr int64_t tile = 16;
  for (int64_t p0 = 0; p0 < k; p0 += tile)
    for (int64_t j0 = 0; j0 < m; j0 += tile)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = p0; p < std::min(p0 + tile, k); ++p)
          for (int64_t j = j0; j < std::min(j0 + tile, m); ++j) pc[i * m + j] += pa[i * k + p] * pb[p * m + j];
  return c;
}

// Fixed-shape specialization for the suite's matmul task (64 x 48 times 48 x 32): the
// contract fixes shapes, so hard-coding them is allowed.
torch::Tensor matmul_fixed(const torch::Tensor& a, const torch::Tensor& b) {
  constexpr int64_t n = 64, k = 48, m = 32;
  TORCH_CHECK(a.size(0) == n && a.size(1) == k && b.size(1) == m, "specialized for 64x48 @ 48x32");
  torch::Tensor c = torch::empty({n, m}, a.options());
  gemm(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n, k, m);
  return c;
}

// Precision downgrade: operands rounded to half precision before multiplying.
torch::Tensor matmul_half_inputs(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor ah = torch::empty_like(a);
  torch::Tensor bh = torch::empty_like(b);
  auto round_half = [](const torch::Tensor& in, torch::Tensor& out) {
    const float* src = in.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < in.numel(); ++i) dst[i] = static_cast<float>(static_cast<c10::Half>(src[i]));
  };
  round_half(a, ah);
  round_half(b, bh);
  return toolbox::matmul(ah, bh);
}

torch::Tensor relu(const torch::Tensor& x) {
  expect_float(x, "x");
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] < 0.f ? 0.f : in[i];
  return y;
}

void relu_(torch::Tensor& x) {
  expect_float(x, "x");
  float* data = x.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) data[i] = data[i] < 0.f ? 0.f : data[i];
}

void relu_into(const torch::Tensor& x, torch::Tensor& out) {
  expect_float(x, "x");
  expect_float(out, "out");
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] < 0.f ? 0.f : in[i];
}

// Off by one: the last element is never written.
torch::Tensor relu_skip_last(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i + 1 < x.numel(); ++i) out[i] = in[i] < 0.f ? 0.f : in[i];
  return y;
}

// Depends on earlier calls, as a race or a read of stale memory would: every second call
// is wrong in one element. The count is the caller's (one CPU int64, incremented here in
// place): native code keeps nothing between calls, as the static checks require.
torch::Tensor relu_flaky(const torch::Tensor& x, torch::Tensor calls) {
  TORCH_CHECK(calls.device().is_cpu() && calls.scalar_type() == torch::kInt64 && calls.numel() == 1,
              "calls must be one CPU int64");
  int64_t& count = *calls.data_ptr<int64_t>();
  torch::Tensor y = toolbox::relu(x);
  y.data_ptr<float>()[x.numel() / 2] += static_cast<float>(count++ % 2) * 10.f;
  return y;
}

// Nothing written: the output is whatever the allocator handed out.
torch::Tensor uninitialized_like(const torch::Tensor& x) { return torch::empty_like(x); }

torch::Tensor relu_with_nan(const torch::Tensor& x) {
  torch::Tensor y = toolbox::relu(x);
  y.data_ptr<float>()[x.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  return y;
}

torch::Tensor copy(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x);
  std::memcpy(y.data_ptr<float>(), x.data_ptr<float>(), sizeof(float) * x.numel());
  return y;
}

torch::Tensor clamp(const torch::Tensor& x, double low, double high) {
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const float lo = static_cast<float>(low), hi = static_cast<float>(high);
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] < lo ? lo : (in[i] > hi ? hi : in[i]);
  return y;
}

void zero_(torch::Tensor& x) { std::memset(x.data_ptr(), 0, x.numel() * x.element_size()); }

torch::Tensor zeros_like(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x);
  std::memset(y.data_ptr(), 0, y.numel() * y.element_size());
  return y;
}

// y = x W^T + b, W stored as nn.Linear does (out x in).
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  expect_float(x, "x");
  expect_float(w, "weight");
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  torch::Tensor y = torch::empty({n, out}, x.options());
  const float* px = x.data_ptr<float>();
  const float* pw = w.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  float* py = y.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      float sum = pb[o];
      for (int64_t p = 0; p < in; ++p) sum += px[i * in + p] * pw[o * in + p];
      py[i * out + o] = sum;
    }
  return y;
}

torch::Tensor transpose_pack(const torch::Tensor& w) {
  const int64_t rows = w.size(0), cols = w.size(1);
  torch::Tensor t = torch::empty({cols, rows}, w.options());
  const float* src = w.data_ptr<float>();
  float* dst = t.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return t;
}

// y = x Wt + b with W already transposed (in x out).
void linear_packed_into(const torch::Tensor& x, const torch::Tensor& wt, const torch::Tensor& b, torch::Tensor& y) {
  const int64_t n = x.size(0), in = x.size(1), out = wt.size(1);
  gemm(x.data_ptr<float>(), wt.data_ptr<float>(), y.data_ptr<float>(), n, in, out);
  float* py = y.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) py[i * out + o] += pb[o];
}

// Sum over the last dimension, in forward or in reverse element order (reordered
// floating-point additions: the same sum within rounding).
torch::Tensor row_sum(const torch::Tensor& x, bool reversed) {
  expect_float(x, "x");
  const int64_t rows = x.size(0), cols = x.size(1);
  torch::Tensor y = torch::empty({rows}, x.options());
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.f;
    if (reversed)
      for (int64_t c = cols - 1; c >= 0; --c) sum += in[r * cols + c];
    else
      for (int64_t c = 0; c < cols; ++c) sum += in[r * cols + c];
    out[r] = sum;
  }
  return y;
}

void noop() {}

void fail(const std::string& message) { throw std::runtime_error(message); }

void crash() {
  volatile int* nowhere = nullptr;
  *nowhere = 1;
}

}  // namespace toolbox

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("matmul", &toolbox::matmul);
  m.def("matmul_into", &toolbox::matmul_into);
  m.def("matmul_tiled", &toolbox::matmul_tiled);
  m.def("matmul_fixed", &toolbox::matmul_fixed);
  m.def("matmul_half_inputs", &toolbox::matmul_half_inputs);
  m.def("relu", &toolbox::relu);
  m.def("relu_", &toolbox::relu_);
  m.def("relu_into", &toolbox::relu_into);
  m.def("relu_skip_last", &toolbox::relu_skip_last);
  m.def("relu_flaky", &toolbox::relu_flaky);
  m.def("uninitialized_like", &toolbox::uninitialized_like);
  m.def("relu_with_nan", &toolbox::relu_with_nan);
  m.def("copy", &toolbox::copy);
  m.def("clamp", &toolbox::clamp);
  m.def("zero_", &toolbox::zero_);
  m.def("zeros_like", &toolbox::zeros_like);
  m.def("linear", &toolbox::linear);
  m.def("transpose_pack", &toolbox::transpose_pack);
  m.def("linear_packed_into", &toolbox::linear_packed_into);
  m.def("row_sum", &toolbox::row_sum);
  m.def("noop", &toolbox::noop);
  m.def("fail", &toolbox::fail);
  m.def("crash", &toolbox::crash);
}
