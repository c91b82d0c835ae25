// SPDX-License-Identifier: Apache-2.0
// Runs an untrusted command in the default sandbox: a throw-away workspace with one
// protected file, a deadline, limits, and a result that says how each limit was enforced.
// Then asks whether CUDA would start in such a sandbox, and why not.
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/cuda_probe.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <unistd.h>

int main() {
  using namespace std::chrono_literals;
  namespace fs = std::filesystem;

  // Somewhere the sandbox user (65534 when this runs as root) can enter.
  const fs::path workspace = fs::path("/tmp") / ("cuda-agent-example-" + std::to_string(::getpid()));
  fs::create_directories(workspace);
  std::ofstream(workspace / "SKILL.md") << "Write a faster kernel.\n";

  cuda_agent::SandboxOptions options;
  options.workspace = workspace;
  options.protected_paths = {"SKILL.md"};
  cuda_agent::hand_over_to_sandbox(workspace, options);

  int status = 0;
  try {
    cuda_agent::AnySandbox sandbox = cuda_agent::make_default_sandbox(options);

    cuda_agent::Command command;
    command.argv = {"/bin/sh", "-c", "echo hacked > SKILL.md; cat /root/.bashrc; echo notes > notes.txt; sleep 60"};
    command.timeout = 1s;
    command.limits.memory_bytes = 512u << 20;
    const cuda_agent::CommandResult result = sandbox.run(command);
    std::cout << nlohmann::json(result).dump(2) << "\n";

    const cuda_agent::CudaProbe probe = cuda_agent::probe_cuda(sandbox);
    std::cout << "CUDA in this sandbox: " << (probe.usable ? "usable" : probe.reason) << "\n";
    status = result.timed_out ? 0 : 1;
  } catch (const cuda_agent::SandboxError& error) {
    std::cerr << error.what() << "\n";
    status = 1;
  }
  fs::remove_all(workspace);
  return status;
}
