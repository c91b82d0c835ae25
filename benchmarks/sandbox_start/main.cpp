// SPDX-License-Identifier: Apache-2.0
// What confinement costs per command: starting /bin/true through run_process,
// ProcessSandbox and BubblewrapSandbox (with and without its seccomp filter and cgroup
// leaf), and the CUDA probe. Prints the median and quartiles over N runs each.
//
//   cuda_agent_benchmark_sandbox_start [runs] [gpu minor]
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/cuda_probe.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

void measure(const std::string& name, int runs, const std::function<bool()>& once) {
  std::vector<double> millis;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!once()) {
      std::cout << name << ": failed\n";
      return;
    }
    millis.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(millis.begin(), millis.end());
  const auto at = [&](double q) {
    return millis[static_cast<std::size_t>(q * static_cast<double>(millis.size() - 1))];
  };
  std::cout << std::left << std::setw(48) << name << std::right << std::fixed << std::setprecision(2) << " median "
            << std::setw(7) << at(0.5) << " ms   q1 " << std::setw(7) << at(0.25) << " ms   q3 " << std::setw(7)
            << at(0.75) << " ms\n";
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 100;
  const std::vector<int> gpus = argc > 2 ? std::vector<int>{std::atoi(argv[2])} : std::vector<int>{};
  const std::filesystem::path workspace =
      std::filesystem::path("/tmp") / ("cuda-agent-benchmark-" + std::to_string(::getpid()));
  std::filesystem::create_directories(workspace);

  cuda_agent::SandboxOptions options;
  options.workspace = workspace;
  options.gpus = gpus;
  cuda_agent::hand_over_to_sandbox(workspace, options);
  cuda_agent::Command command;
  command.argv = {"/bin/true"};

  cuda_agent::ProcessSpec spec;
  spec.argv = {"/bin/true"};
  measure("run_process", runs, [&] { return cuda_agent::run_process(spec).succeeded(); });

  cuda_agent::ProcessSandbox process(options);
  measure("ProcessSandbox", runs, [&] { return process.run(command).succeeded(); });

  try {
    cuda_agent::BubblewrapSandbox confined(options);
    std::cout << "cgroup: "
              << (confined.cgroup_limitations().empty() ? "memory and pids limits" : confined.cgroup_limitations())
              << "\n";
    measure("BubblewrapSandbox", runs, [&] { return confined.run(command).succeeded(); });
    options.syscall_filter = false;
    cuda_agent::BubblewrapSandbox unfiltered(options);
    measure("BubblewrapSandbox, no seccomp filter", runs, [&] { return unfiltered.run(command).succeeded(); });
    options.use_cgroups = false;
    cuda_agent::BubblewrapSandbox bare(options);
    measure("BubblewrapSandbox, no seccomp filter, no cgroup", runs, [&] { return bare.run(command).succeeded(); });
    cuda_agent::CudaProbe probe;
    measure("probe_cuda (BubblewrapSandbox)", std::max(1, runs / 10), [&] {
      probe = cuda_agent::probe_cuda(confined);
      return true;
    });
    std::cout << "CUDA: "
              << (probe.usable ? std::to_string(probe.devices.size()) + " device(s), " +
                                     (probe.devices.empty() ? "" : probe.devices.front().name)
                               : probe.reason)
              << "\n";
  } catch (const cuda_agent::SandboxError& error) {
    std::cout << "BubblewrapSandbox unavailable: " << error.what() << "\n";
  }
  std::filesystem::remove_all(workspace);
  return 0;
}
