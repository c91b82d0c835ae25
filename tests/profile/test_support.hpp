// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the profiling tests: an unconfined sandbox double and the CPU fixtures.

#include <cuda_agent/process.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
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

/// Sessions short enough for CI on the CPU (a few rounds, no warm-up, per-call timing).
inline HarnessProfilerOptions quick_cpu_timing() {
  HarnessProfilerOptions options;
  options.device = "cpu";
  options.budget.seconds = 0.3;
  options.budget.min_rounds = 6;
  options.budget.floor_rounds = 4;
  options.budget.max_rounds = 16;
  options.budget.warmup_seconds = 0;
  options.budget.calibration_samples = 3;
  options.short_kernel_us = 0;
  return options;
}

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
