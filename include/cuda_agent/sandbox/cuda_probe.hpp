// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Checking, before an evaluation starts, that CUDA works inside a sandbox, and why not
/// when it does not: `probe_cuda(sandbox)` runs a tiny Python program there that loads
/// libcuda.so.1 and creates a context on every device it sees. `host_nvidia_gpus()` lists
/// the GPUs a host can hand out through `SandboxOptions::gpus`.
///
/// @code{.cpp}
/// cuda_agent::SandboxOptions options;
/// options.workspace = "/var/lib/my-server/ws-17";
/// options.gpus = {1};
/// cuda_agent::BubblewrapSandbox sandbox(options);
/// const cuda_agent::CudaProbe probe = cuda_agent::probe_cuda(sandbox);
/// if (!probe.usable) throw std::runtime_error("CUDA does not start in the sandbox: " + probe.reason);
/// @endcode

#include <chrono>    // seconds
#include <optional>  // optional
#include <string>    // string
#include <vector>    // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/cuda_probe_script.hpp"
#include "cuda_agent/sandbox/detail/nvidia_devices.hpp"

namespace cuda_agent {

struct CudaDevice {
  std::string name;
  /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
  std::string uuid;
};

/// How far CUDA got inside a sandbox.
struct CudaProbe {
  /// The driver loaded, and a context was created on every visible device (at least one).
  bool usable = false;
  std::vector<CudaDevice> devices;
  /// As cuDriverGetVersion reports it (13000 for CUDA 13.0); 0 when unknown.
  int driver_version = 0;
  /// Where it stopped: "run" (the probe did not run), "load" (libcuda.so.1), a driver
  /// call ("cuInit", "cuDevicePrimaryCtxRetain", ...), or "ok".
  std::string stage;
  std::optional<int> error_code;
  /// The driver's name for the error ("CUDA_ERROR_NO_DEVICE").
  std::string error_name;
  /// Why CUDA is not usable, in words; empty when it is.
  std::string reason;
};

/// Parses the probe program's output (one JSON line) together with how its run ended.
[[nodiscard]] inline CudaProbe interpret_cuda_probe(const CommandResult& run, const std::string& python) {
  CudaProbe probe;
  probe.stage = "run";
  const std::string& output = run.standard_output.text;
  nlohmann::json report = nlohmann::json::parse(output.substr(0, output.find('\n')), nullptr, false);
  if (!report.is_object()) {
    if (run.exit_code == 127 || run.exit_code == 126)
      probe.reason = "the CUDA probe could not run: '" + python + "' is not available inside the sandbox (" +
                     run.standard_error.text + run.standard_output.text + ")";
    else
      probe.reason =
          "the CUDA probe failed (" + describe_exit(run) + "): " + run.standard_error.text + run.standard_output.text;
    return probe;
  }
  probe.stage = report.value("stage", std::string("run"));
  probe.driver_version = report.value("driver", 0);
  if (probe.stage == "load") {
    probe.reason = "the NVIDIA driver library libcuda.so.1 cannot be loaded inside the sandbox (" +
                   report.value("message", std::string()) +
                   "): no NVIDIA driver on this host, or its library directory is hidden from the sandbox";
    return probe;
  }
  if (report.contains("code")) {
    probe.error_code = report.value("code", 0);
    probe.error_name = report.value("name", std::string());
    probe.reason = probe.stage + " failed with " + probe.error_name + " (" + std::to_string(*probe.error_code) +
                   "): " + detail::explain_cuda_error(*probe.error_code);
    return probe;
  }
  for (const auto& device : report.value("devices", nlohmann::json::array()))
    probe.devices.push_back({device.value("name", std::string()), device.value("uuid", std::string())});
  probe.usable = probe.stage == "ok" && !probe.devices.empty();
  if (!probe.usable) probe.reason = "CUDA started but reports no device";
  return probe;
}

/// Runs the CUDA probe in `sandbox` with the Python interpreter `python` (a name looked
/// up in the sandbox's PATH, or a path). Takes a few hundred milliseconds per device.
template <Sandbox S>
[[nodiscard]] CudaProbe probe_cuda(S& sandbox, const std::string& python = "python3",
                                   std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  Command command;
  command.argv = {python, "-c", std::string(detail::cuda_probe_script)};
  command.timeout = timeout;
  command.merge_stderr = false;
  return interpret_cuda_probe(sandbox.run(command), python);
}

/// The N of every /dev/nvidiaN on this host: the values `SandboxOptions::gpus` accepts.
[[nodiscard]] inline std::vector<int> host_nvidia_gpus() { return detail::nvidia_gpu_minors("/dev"); }

}  // namespace cuda_agent
