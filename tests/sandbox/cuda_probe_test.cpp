// SPDX-License-Identifier: Apache-2.0
// The CUDA probe's verdicts, from recorded outputs and from a real sandbox without GPUs.
#include "catch.hpp"
#include "sandbox_test_support.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/cuda_probe.hpp>

#include <string>

namespace ca = cuda_agent;
using Catch::Matchers::Contains;

namespace {

ca::CommandResult printed(std::string output, int exit_code = 0) {
  ca::CommandResult result;
  result.exit_code = exit_code;
  result.standard_output.text = std::move(output);
  return result;
}

}  // namespace

TEST_CASE("the CUDA probe's report becomes a reason", "[sandbox][cuda_probe]") {
  const auto no_driver = ca::interpret_cuda_probe(printed(R"({"stage": "load", "message": "libcuda.so.1: cannot open"})"
                                                          "\n"),
                                                  "python3");
  CHECK_FALSE(no_driver.usable);
  CHECK(no_driver.stage == "load");
  CHECK_THAT(no_driver.reason, Contains("libcuda.so.1 cannot be loaded"));

  const auto no_device =
      ca::interpret_cuda_probe(printed(R"({"stage": "cuInit", "code": 100, "name": "CUDA_ERROR_NO_DEVICE"})"
                                       "\n"),
                               "python3");
  CHECK_FALSE(no_device.usable);
  CHECK(no_device.error_code == 100);
  CHECK(no_device.error_name == "CUDA_ERROR_NO_DEVICE");
  CHECK_THAT(no_device.reason, Contains("no /dev/nvidiaN is bound"));

  const auto os_error = ca::interpret_cuda_probe(
      printed(R"({"stage": "cuInit", "code": 304, "name": "CUDA_ERROR_OPERATING_SYSTEM"})"), "python3");
  CHECK_THAT(os_error.reason, Contains("/dev/nvidia-uvm"));

  const auto address_space = ca::interpret_cuda_probe(
      printed(R"({"stage": "cuDevicePrimaryCtxRetain", "code": 2, "name": "CUDA_ERROR_OUT_OF_MEMORY"})"), "python3");
  CHECK_THAT(address_space.reason, Contains("RLIMIT_AS"));

  const auto working = ca::interpret_cuda_probe(
      printed(R"({"stage": "ok", "driver": 13000, "devices": [{"name": "NVIDIA H200", "uuid": "GPU-1"}]})"), "python3");
  CHECK(working.usable);
  CHECK(working.reason.empty());
  CHECK(working.driver_version == 13000);
  REQUIRE(working.devices.size() == 1);
  CHECK(working.devices[0].name == "NVIDIA H200");

  const auto no_python = ca::interpret_cuda_probe(printed("cannot execute python3: No such file\n", 127), "python3");
  CHECK_FALSE(no_python.usable);
  CHECK(no_python.stage == "run");
  CHECK_THAT(no_python.reason, Contains("'python3' is not available inside the sandbox"));
}

TEST_CASE("a sandbox without GPUs reports why CUDA cannot start in it", "[sandbox][cuda_probe]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  if (!ca::testing::python_installed()) CUDA_AGENT_SKIP("python3 is not installed");
  ca::testing::ScratchDirectory scratch("probe-no-gpu");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  const ca::CudaProbe probe = ca::probe_cuda(sandbox);
  INFO(probe.reason);
  CHECK_FALSE(probe.usable);
  CHECK(probe.devices.empty());
  // Without a driver the library is missing; with one, the device nodes are.
  CHECK((probe.stage == "load" || probe.error_code == 100));
  CHECK_FALSE(probe.reason.empty());
}
