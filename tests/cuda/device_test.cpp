// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/cuda/device.hpp>

namespace cu = cuda_agent::cuda;

TEST_CASE("no GPU is an answer, not an error", "[cuda]") {
  // Holds on every machine: either devices are listed or the count is zero.
  const auto devices = cu::query_devices();
  CHECK(static_cast<int>(devices.size()) == cu::device_count());
  CHECK_THROWS_AS(cu::query_device(cu::device_count() + 7), cu::CudaError);
}

TEST_CASE("the runtime reports the facts an evaluation needs", "[gpu][cuda]") {
  if (cu::device_count() == 0) CUDA_AGENT_SKIP("no CUDA device visible to this process");
  const cu::DeviceInfo info = cu::query_device(0);
  CHECK_FALSE(info.name.empty());
  CHECK(info.compute_capability_major >= 7);
  CHECK(info.nvcc_arch().rfind("sm_", 0) == 0);
  CHECK(info.multiprocessors > 0);
  CHECK(info.l2_cache_bytes >= 1u << 20);
  CHECK(info.l2_flush_bytes() == 2 * info.l2_cache_bytes);
  CHECK(info.sm_clock_khz > 0);
  CHECK(info.global_memory_bytes > info.l2_cache_bytes);
}
