// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared by the verifier's tests and the adversarial suite: a harness verifier on the CPU
// or the GPU (workers confined by bubblewrap, the default sandbox), a compile driver for
// test candidates, candidates assembled from the suite's files, and a GPU probe.

#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>

#include <cstdlib>     // getenv
#include <filesystem>  // path
#include <fstream>     // ofstream
#include <memory>      // shared_ptr, make_shared
#include <string>      // string
#include <utility>     // move

#include <unistd.h>  // geteuid, getpid

namespace cuda_agent::testing {

/// A model_new.py that hands its input to the extension's relu: the candidate the
/// verifier's, the profiler's and the evaluator's tests build on.
inline constexpr const char* relu_model_new = R"(import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu(x)
)";

inline std::filesystem::path source_directory() { return CUDA_AGENT_SOURCE_DIR; }
inline std::filesystem::path adversarial_directory() { return source_directory() / "tests" / "adversarial"; }

/// A directory for one test run, under the system's temporary directory (reachable by
/// the sandbox users, unlike the build tree on some machines), removed at the end.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("cuda-agent-test-" + name + "-" + std::to_string(::getpid()) + "-" + detail::random_hex(4))) {
    detail::make_open_directory(path_);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// Whether an NVIDIA GPU is usable here (device node and driver).
inline bool gpu_available() {
  return std::filesystem::exists("/dev/nvidia0") && std::filesystem::exists("/proc/driver/nvidia/version");
}

inline HarnessOptions harness_options(const std::string& device) {
  HarnessOptions options;
  options.device = device;
  options.python = CUDA_AGENT_PYTHON;
  return options;
}

/// The compile driver's cache lives in the build tree, so that test processes share it.
inline std::filesystem::path compile_cache_directory() {
  if (const char* explicit_directory = std::getenv("CUDA_AGENT_TEST_COMPILE_CACHE");
      explicit_directory && *explicit_directory)
    return explicit_directory;
  return std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "test-cache" / "compile";
}

/// A compile driver for the suite's own candidates. Its commands run unconfined
/// (ProcessSandbox, as the sandbox user when root): the sources are the test's own; the
/// trusted evaluation of untrusted candidates is given a confining sandbox by its host.
inline std::shared_ptr<CompileDriver<ProcessSandbox>> test_compiler(const std::string& device,
                                                                    const std::filesystem::path& workspace) {
  SandboxOptions sandbox;
  sandbox.workspace = workspace;
  CompileOptions options;
  options.device = device;
  options.python = CUDA_AGENT_PYTHON;
  options.cache_directory = compile_cache_directory();
  if (::geteuid() == 0) options.sandbox_user = UserIdentity{65534, 65534};
  return std::make_shared<CompileDriver<ProcessSandbox>>(ProcessSandbox(sandbox), options);
}

inline void write_text(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

inline Task task_from_file(const std::filesystem::path& file) { return load_kernelbench_task(file); }

}  // namespace cuda_agent::testing

namespace cuda_agent::testing {

/// A candidate directory made of `model_new` and the suite's shared kernels for `device`
/// (kernels/cpu/toolbox.cpp, or kernels/cuda/*), or the given kernel directory.
inline std::filesystem::path assemble_candidate(const std::filesystem::path& directory, const std::string& model_new,
                                                const std::string& device, const std::filesystem::path& kernels = {}) {
  std::filesystem::create_directories(directory / "kernels");
  write_text(directory / "model_new.py", model_new);
  const std::filesystem::path from = kernels.empty() ? adversarial_directory() / "kernels" / device : kernels;
  for (const auto& entry : std::filesystem::directory_iterator(from))
    if (entry.is_regular_file())
      std::filesystem::copy_file(entry.path(), directory / "kernels" / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
  return directory;
}

inline Task adversarial_task(const std::string& device, const std::string& name) {
  return task_from_file(adversarial_directory() / "tasks" / device / (name + ".py"));
}

}  // namespace cuda_agent::testing
