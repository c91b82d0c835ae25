// SPDX-License-Identifier: Apache-2.0
// A correct matrix product whose binding uses every family of symbols the link policy
// allows a CUDA extension on a task that multiplies matrices: the C++ runtime and
// standard library, the C library, torch's tensor creation, views, copies and metadata,
// torch's checks, pybind11, torch's CUDA context (guards, streams from the pool, device
// properties, the caching allocator), the CUDA runtime (events, copies, memsets, kernel
// attributes, occupancy) and cuBLAS. A kernel with inline PTX scales the product on a
// side stream joined back before returning. It must be accepted.
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "families.cuh"

namespace families {

std::mutex events_mutex;
std::unordered_map<int, std::pair<cudaEvent_t, cudaEvent_t>> events;

std::string describe(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.dtype() << " on " << t.device();
  return out.str();
}

void check_matrix(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor, got ", describe(t));
  TORCH_CHECK(t.dim() == 2 && t.scalar_type() == torch::kFloat32, name, " must be a float32 matrix, got ", describe(t));
  TORCH_INTERNAL_ASSERT(t.numel() == t.size(0) * t.size(1));
}

std::pair<cudaEvent_t, cudaEvent_t> events_for(int device) {
  const std::lock_guard<std::mutex> lock(events_mutex);
  auto found = events.find(device);
  if (found == events.end()) {
    std::pair<cudaEvent_t, cudaEvent_t> created{};
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&created.first, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&created.second, cudaEventDisableTiming));
    found = events.emplace(device, created).first;
  }
  return found->second;
}

torch::Tensor matmul(const torch::Tensor& a_in, const torch::Tensor& b_in, std::optional<torch::Tensor> out,
                     double scale) {
  check_matrix(a_in, "a");
  check_matrix(b_in, "b");
  TORCH_CHECK(a_in.size(1) == b_in.size(0), "shapes do not chain: ", describe(a_in), " and ", describe(b_in));
  const c10::cuda::CUDAGuard guard(a_in.device());
  const torch::Tensor a = a_in.contiguous();
  const torch::Tensor b = b_in.view({b_in.size(0), b_in.size(1)}).contiguous();
  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = static_cast<int>(b.size(1));
  torch::Tensor c = out.has_value() ? *out : torch::empty({m, n}, a.options());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();

  // A scratch row from the caching allocator, cleared and filled with a copy of C's
  // first row at the end (a check that the product is finite).
  const cudaDeviceProp* properties = at::cuda::getCurrentDeviceProperties();
  TORCH_CHECK(properties->warpSize == 32, "unexpected warp size ", properties->warpSize);
  void* scratch = c10::cuda::CUDACachingAllocator::raw_alloc(static_cast<std::size_t>(n) * sizeof(float));
  C10_CUDA_CHECK(cudaMemsetAsync(scratch, 0, static_cast<std::size_t>(n) * sizeof(float), stream));

  // C = A B with cuBLAS (row-major C is column-major C^T = B^T A^T).
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  TORCH_CHECK(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t status = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.data_ptr<float>(), n,
                                            a.data_ptr<float>(), k, &zero, c.data_ptr<float>(), n);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed: ", cublasGetStatusString(status));

  // Scale on a stream from torch's pool, joined both ways.
  const auto [inputs_ready, scaled] = events_for(a.get_device());
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, a.get_device());
  C10_CUDA_CHECK(cudaEventRecord(inputs_ready, stream));
  C10_CUDA_CHECK(cudaStreamWaitEvent(side.stream(), inputs_ready, 0));
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    C10_CUDA_CHECK(scale_in_place(c.data_ptr<float>(), c.numel(), static_cast<float>(scale),
                                  at::cuda::getCurrentCUDAStream().stream()));
  }
  C10_CUDA_CHECK(cudaEventRecord(scaled, side.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(stream, scaled, 0));
  c.record_stream(side);

  C10_CUDA_CHECK(cudaMemcpyAsync(scratch, c.data_ptr<float>(), static_cast<std::size_t>(n) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  c10::cuda::CUDACachingAllocator::raw_delete(scratch);
  C10_CUDA_CHECK(cudaGetLastError());
  return c;
}

std::vector<int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

}  // namespace families

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "every family of symbols the link policy allows";
  m.def("matmul", &families::matmul, "C = scale * A B", py::arg("a"), py::arg("b"), py::arg("out") = py::none(),
        py::arg("scale") = 1.0);
  m.def("describe", &families::describe, py::arg("t"));
  m.def("shape_of", &families::shape_of, py::arg("t"));
}
