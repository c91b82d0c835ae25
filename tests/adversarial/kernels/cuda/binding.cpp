// SPDX-License-Identifier: Apache-2.0
// Python bindings of the CUDA toolbox: the same functions as the CPU toolbox
// (kernels/cpu/toolbox.cpp), so that most candidates run unchanged on both devices, plus
// what only CUDA has (streams, cuBLAS, host round trips).
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "toolbox.cuh"

namespace bindings {

cudaStream_t current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

void expect_float(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

void check(cudaError_t status, const char* what) {
  TORCH_CHECK(status == cudaSuccess, what, ": ", cudaGetErrorString(status));
}

const float* in(const torch::Tensor& t) { return t.data_ptr<float>(); }
float* out(torch::Tensor& t) { return t.data_ptr<float>(); }

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  expect_float(a, "a");
  expect_float(b, "b");
  const c10::cuda::CUDAGuard guard(a.device());
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  check(toolbox::matmul(in(a), in(b), out(c), a.size(0), a.size(1), b.size(1), current_stream()), "matmul");
  return c;
}

void matmul_into(const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c) {
  check(toolbox::matmul(in(a), in(b), out(c), a.size(0), a.size(1), b.size(1), current_stream()), "matmul");
}

torch::Tensor matmul_tiled(const torch::Tensor& a, const torch::Tensor& b) {
  expect_float(a, "a");
  expect_float(b, "b");
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  check(toolbox::matmul_tiled(in(a), in(b), out(c), a.size(0), a.size(1), b.size(1), current_stream()), "matmul_tiled");
  return c;
}

torch::Tensor matmul_fixed(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.size(0) == toolbox::fixed_m && a.size(1) == toolbox::fixed_k && b.size(1) == toolbox::fixed_n,
              "specialized for 512x384 @ 384x256");
  torch::Tensor c = torch::empty({toolbox::fixed_m, toolbox::fixed_n}, a.options());
  check(toolbox::matmul_fixed(in(a), in(b), out(c), current_stream()), "matmul_fixed");
  return c;
}

torch::Tensor matmul_half_inputs(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  check(toolbox::matmul_half_inputs(in(a), in(b), out(c), a.size(0), a.size(1), b.size(1), current_stream()),
        "matmul_half_inputs");
  return c;
}

// C = A B in row-major is C^T = B^T A^T in cuBLAS's column-major terms.
void cublas_gemm(cublasHandle_t handle, const torch::Tensor& a, const torch::Tensor& b, torch::Tensor& c) {
  const float one = 1.f, zero = 0.f;
  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = static_cast<int>(b.size(1));
  TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, in(b), n, in(a), k, &zero, out(c), n) ==
                  CUBLAS_STATUS_SUCCESS,
              "cublasSgemm failed");
}

torch::Tensor matmul_cublas(const torch::Tensor& a, const torch::Tensor& b) {
  expect_float(a, "a");
  expect_float(b, "b");
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  TORCH_CHECK(cublasSetStream(handle, current_stream()) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
  cublas_gemm(handle, a, b, c);
  return c;
}

// The exploit of the catalog (#12): cuBLAS bound to a private non-blocking stream, work
// queued there `repeats` times, and nothing joins it back to the current stream.
torch::Tensor matmul_cublas_unjoined(const torch::Tensor& a, const torch::Tensor& b, int64_t repeats) {
  static cudaStream_t side = [] {
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    return stream;
  }();
  static cublasHandle_t handle = [] {
    cublasHandle_t created = nullptr;
    cublasCreate(&created);
    cublasSetStream(created, side);
    return created;
  }();
  torch::Tensor c = torch::empty({a.size(0), b.size(1)}, a.options());
  for (int64_t i = 0; i < repeats; ++i) cublas_gemm(handle, a, b, c);
  return c;
}

torch::Tensor relu(const torch::Tensor& x) {
  expect_float(x, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty_like(x);
  check(toolbox::relu(in(x), out(y), x.numel(), current_stream()), "relu");
  return y;
}

void relu_(torch::Tensor& x) {
  expect_float(x, "x");
  check(toolbox::relu(in(x), out(x), x.numel(), current_stream()), "relu_");
}

void relu_into(const torch::Tensor& x, torch::Tensor& y) {
  expect_float(x, "x");
  expect_float(y, "out");
  check(toolbox::relu(in(x), out(y), x.numel(), current_stream()), "relu_into");
}

torch::Tensor relu_skip_last(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x);
  check(toolbox::relu_range(in(x), out(y), 0, x.numel() - 1, current_stream()), "relu_skip_last");
  return y;
}

// Every second call wrong in one element; the count is the caller's (one CPU int64,
// incremented here in place), so that native code keeps nothing between calls.
torch::Tensor relu_flaky(const torch::Tensor& x, torch::Tensor calls) {
  TORCH_CHECK(calls.device().is_cpu() && calls.scalar_type() == torch::kInt64 && calls.numel() == 1,
              "calls must be one CPU int64");
  int64_t& count = *calls.data_ptr<int64_t>();
  torch::Tensor y = bindings::relu(x);
  if (count++ % 2 == 1) check(toolbox::add_at(out(y), x.numel() / 2, 10.f, current_stream()), "relu_flaky");
  return y;
}

torch::Tensor uninitialized_like(const torch::Tensor& x) { return torch::empty_like(x); }

torch::Tensor relu_with_nan(const torch::Tensor& x) {
  torch::Tensor y = bindings::relu(x);
  check(toolbox::set_at(out(y), x.numel() - 1, std::numeric_limits<float>::quiet_NaN(), current_stream()),
        "relu_with_nan");
  return y;
}

// ReLU on a stream this extension created once. The side stream waits for the current one
// (the inputs are ready there) when `wait_for_inputs`, and the current one waits for the
// result when `join`.
torch::Tensor relu_on_side_stream(const torch::Tensor& x, bool wait_for_inputs, bool join, int64_t repeats) {
  static cudaStream_t side = [] {
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    return stream;
  }();
  static cudaEvent_t inputs_ready = [] {
    cudaEvent_t event = nullptr;
    cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    return event;
  }();
  static cudaEvent_t done = [] {
    cudaEvent_t event = nullptr;
    cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    return event;
  }();
  torch::Tensor y = torch::empty_like(x);
  if (wait_for_inputs) {
    check(cudaEventRecord(inputs_ready, current_stream()), "record");
    check(cudaStreamWaitEvent(side, inputs_ready, 0), "wait");
  }
  for (int64_t i = 0; i < repeats; ++i) check(toolbox::relu(in(x), out(y), x.numel(), side), "relu on the side stream");
  if (join) {
    check(cudaEventRecord(done, side), "record");
    check(cudaStreamWaitEvent(current_stream(), done, 0), "wait");
  }
  return y;
}

torch::Tensor relu_side_stream(const torch::Tensor& x, bool join, int64_t repeats) {
  return relu_on_side_stream(x, join, join, repeats);
}

// The side stream waits for the inputs, but nothing joins it back.
torch::Tensor relu_side_stream_never_joined(const torch::Tensor& x, int64_t repeats) {
  return relu_on_side_stream(x, true, false, repeats);
}

// Computes on the host: two copies and no kernel.
torch::Tensor host_relu(const torch::Tensor& x) {
  std::vector<float> host(static_cast<size_t>(x.numel()));
  check(cudaMemcpyAsync(host.data(), in(x), host.size() * sizeof(float), cudaMemcpyDeviceToHost, current_stream()), "copy");
  check(cudaStreamSynchronize(current_stream()), "synchronize");
  for (float& value : host) value = value < 0.f ? 0.f : value;
  torch::Tensor y = torch::empty_like(x);
  check(cudaMemcpyAsync(out(y), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, current_stream()), "copy");
  check(cudaStreamSynchronize(current_stream()), "synchronize");
  return y;
}

torch::Tensor copy(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x);
  check(toolbox::copy(in(x), out(y), x.numel(), current_stream()), "copy");
  return y;
}

torch::Tensor clamp(const torch::Tensor& x, double low, double high) {
  torch::Tensor y = torch::empty_like(x);
  check(toolbox::clamp(in(x), out(y), x.numel(), static_cast<float>(low), static_cast<float>(high), current_stream()),
        "clamp");
  return y;
}

void zero_(torch::Tensor& x) {
  check(cudaMemsetAsync(x.data_ptr(), 0, x.numel() * x.element_size(), current_stream()), "memset");
}

torch::Tensor zeros_like(const torch::Tensor& x) {
  torch::Tensor y = torch::empty_like(x);
  check(toolbox::fill(out(y), y.numel(), 0.f, current_stream()), "fill");
  return y;
}

torch::Tensor linear_with(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, bool half) {
  expect_float(x, "x");
  expect_float(w, "weight");
  torch::Tensor y = torch::empty({x.size(0), w.size(0)}, x.options());
  check(toolbox::linear(in(x), in(w), in(b), out(y), x.size(0), x.size(1), w.size(0), half, current_stream()), "linear");
  return y;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return linear_with(x, w, b, false);
}

// Mixed precision: operands rounded to fp16, products accumulated in fp32.
torch::Tensor linear_half_operands(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return linear_with(x, w, b, true);
}

torch::Tensor transpose_pack(const torch::Tensor& w) {
  torch::Tensor t = torch::empty({w.size(1), w.size(0)}, w.options());
  check(toolbox::transpose(in(w), out(t), w.size(0), w.size(1), current_stream()), "transpose");
  return t;
}

void linear_packed_into(const torch::Tensor& x, const torch::Tensor& wt, const torch::Tensor& b, torch::Tensor& y) {
  check(toolbox::linear_packed(in(x), in(wt), in(b), out(y), x.size(0), x.size(1), wt.size(1), current_stream()),
        "linear_packed");
}

torch::Tensor row_sum(const torch::Tensor& x, bool reordered) {
  expect_float(x, "x");
  torch::Tensor y = torch::empty({x.size(0)}, x.options());
  check(toolbox::row_sum(in(x), out(y), x.size(0), x.size(1), reordered, current_stream()), "row_sum");
  return y;
}

void noop() {}

void fail(const std::string& message) { throw std::runtime_error(message); }

void crash() {
  volatile int* nowhere = nullptr;
  *nowhere = 1;
}

}  // namespace bindings

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("matmul", &bindings::matmul);
  m.def("matmul_into", &bindings::matmul_into);
  m.def("matmul_tiled", &bindings::matmul_tiled);
  m.def("matmul_fixed", &bindings::matmul_fixed);
  m.def("matmul_half_inputs", &bindings::matmul_half_inputs);
  m.def("matmul_cublas", &bindings::matmul_cublas);
  m.def("matmul_cublas_unjoined", &bindings::matmul_cublas_unjoined);
  m.def("relu", &bindings::relu);
  m.def("relu_", &bindings::relu_);
  m.def("relu_into", &bindings::relu_into);
  m.def("relu_skip_last", &bindings::relu_skip_last);
  m.def("relu_flaky", &bindings::relu_flaky);
  m.def("uninitialized_like", &bindings::uninitialized_like);
  m.def("relu_with_nan", &bindings::relu_with_nan);
  m.def("relu_side_stream", &bindings::relu_side_stream);
  m.def("relu_side_stream_never_joined", &bindings::relu_side_stream_never_joined);
  m.def("host_relu", &bindings::host_relu);
  m.def("copy", &bindings::copy);
  m.def("clamp", &bindings::clamp);
  m.def("zero_", &bindings::zero_);
  m.def("zeros_like", &bindings::zeros_like);
  m.def("linear", &bindings::linear);
  m.def("linear_half_operands", &bindings::linear_half_operands);
  m.def("transpose_pack", &bindings::transpose_pack);
  m.def("linear_packed_into", &bindings::linear_packed_into);
  m.def("row_sum", &bindings::row_sum);
  m.def("noop", &bindings::noop);
  m.def("fail", &bindings::fail);
  m.def("crash", &bindings::crash);
}
