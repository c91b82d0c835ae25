// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the profiling tests: an unconfined sandbox double and the CPU fixtures.

#include <cuda_agent/process.hpp>
#include <cuda_agent/sandbox.hpp>
#include <cuda_agent/task.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cuda_agent::testing {

/// Runs commands without confinement: the CPU fixtures are trusted test code.
struct UnconfinedTestSandbox {
  CommandResult run(const Command& command) {
    ProcessSpec spec;
    spec.argv = command.argv;
    spec.environment = command.environment;
    spec.working_directory = command.working_directory;
    spec.timeout = command.timeout;
    spec.merge_stderr = command.merge_stderr;
    spec.output_limit = command.output_limit;
    spec.cancellation = command.cancellation;
    CommandResult result;
    static_cast<ProcessResult&>(result) = run_process(spec);
    result.sandbox = "unconfined test double";
    return result;
  }
};

inline std::filesystem::path timing_fixtures() {
  return std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "python" / "timing_fixtures";
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream stream(path);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

inline Task fixture_task() {
  Task task;
  task.name = "fixture/scale_bias_relu";
  task.reference_source = read_text(timing_fixtures() / "small_task.py");
  return task;
}

}  // namespace cuda_agent::testing
