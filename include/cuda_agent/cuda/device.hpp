// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What the CUDA runtime says about the GPUs of this machine: the facts an evaluation
/// needs to be fair and to build for the right target (architecture for nvcc, L2 size
/// for the flush buffer, clocks for throttling checks, memory for sizing inputs).
/// Component `cuda` (links CUDA::cudart).

#include <cstddef>    // size_t
#include <stdexcept>  // runtime_error
#include <string>     // string, to_string
#include <vector>     // vector

#include <cuda_runtime_api.h>

namespace cuda_agent::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessors = 0;
  std::size_t global_memory_bytes = 0;
  std::size_t l2_cache_bytes = 0;
  /// Largest persisting-L2 window a kernel may request (0 where unsupported).
  std::size_t max_persisting_l2_bytes = 0;
  std::size_t shared_memory_per_block_optin_bytes = 0;
  /// Peak SM and memory clocks in kHz, as the device reports them.
  int sm_clock_khz = 0;
  int memory_clock_khz = 0;
  /// 0 on headless compute GPUs: nothing stops a kernel that never ends but killing its process.
  bool kernel_exec_timeout = false;

  /// "sm_90" for compute capability 9.0: nvcc's -arch value for this device.
  [[nodiscard]] std::string nvcc_arch() const {
    return "sm_" + std::to_string(compute_capability_major) + std::to_string(compute_capability_minor);
  }
  /// Bytes an L2 flush should write to evict everything: twice the cache, as the
  /// profiler's fairness rules ask.
  [[nodiscard]] std::size_t l2_flush_bytes() const noexcept { return 2 * l2_cache_bytes; }
};

/// A CUDA runtime call failed.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what)
      : std::runtime_error(what + ": " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")"), code_(code) {}
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {
inline void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess) throw CudaError(code, what);
}
inline int attribute(cudaDeviceAttr attribute, int device, const char* what) {
  int value = 0;
  check(cudaDeviceGetAttribute(&value, attribute, device), what);
  return value;
}
}  // namespace detail

/// Number of devices this process can use; 0 (not an exception) when there is no GPU or
/// no driver, because "no GPU" is an answer, not a failure.
[[nodiscard]] inline int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error for later calls
    return 0;
  }
  return count;
}

/// Properties of device `index`. Throws CudaError when the device cannot be queried.
[[nodiscard]] inline DeviceInfo query_device(int index) {
  cudaDeviceProp properties{};
  detail::check(cudaGetDeviceProperties(&properties, index), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.index = index;
  info.name = properties.name;
  info.compute_capability_major = properties.major;
  info.compute_capability_minor = properties.minor;
  info.multiprocessors = properties.multiProcessorCount;
  info.global_memory_bytes = properties.totalGlobalMem;
  info.l2_cache_bytes = static_cast<std::size_t>(properties.l2CacheSize);
  info.max_persisting_l2_bytes = static_cast<std::size_t>(properties.persistingL2CacheMaxSize);
  info.shared_memory_per_block_optin_bytes = properties.sharedMemPerBlockOptin;
  // Clock rates moved out of cudaDeviceProp in CUDA 13; attributes work in every version.
  info.sm_clock_khz = detail::attribute(cudaDevAttrClockRate, index, "cudaDevAttrClockRate");
  info.memory_clock_khz = detail::attribute(cudaDevAttrMemoryClockRate, index, "cudaDevAttrMemoryClockRate");
  info.kernel_exec_timeout =
      detail::attribute(cudaDevAttrKernelExecTimeout, index, "cudaDevAttrKernelExecTimeout") != 0;
  return info;
}

/// Properties of every device this process can use (empty without a GPU).
[[nodiscard]] inline std::vector<DeviceInfo> query_devices() {
  std::vector<DeviceInfo> devices;
  const int count = device_count();
  devices.reserve(static_cast<std::size_t>(count));
  for (int index = 0; index < count; ++index) devices.push_back(query_device(index));
  return devices;
}

}  // namespace cuda_agent::cuda
