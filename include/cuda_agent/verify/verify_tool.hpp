// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Verify` task tool: builds the workspace's `kernels/` if needed (with the compile
/// driver, sharing the Compile tool's build directory and caches) and checks `ModelNew`
/// against the task's `Model` with the harness verifier. It only informs the model; the
/// reward comes from the trusted evaluation, which works on a copy of the sources.

#include <cstddef>     // size_t
#include <exception>   // exception
#include <filesystem>  // path
#include <memory>      // shared_ptr
#include <stdexcept>   // invalid_argument
#include <string>      // string
#include <utility>     // move

#include <nlohmann/json.hpp>

#include "cuda_agent/compile/compile_driver.hpp"
#include "cuda_agent/compile/compile_tool.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/verifier.hpp"
#include "cuda_agent/verify/harness_verifier.hpp"
#include "cuda_agent/verify/verification_summary.hpp"

namespace cuda_agent {

struct VerifyToolOptions {
  /// Where the driver builds; the Compile tool's build directory, so that a build it made
  /// is reused. Outside the workspace.
  std::filesystem::path build_directory;
  /// Bytes of the candidate's own printed output shown to the model.
  std::size_t output_limit = 3000;
  std::size_t max_diagnostics = 30;
  /// The episode's own choices (tolerance profile, library policy), where the verifier
  /// takes them (`PolicyVerifier`): the tool judges as the episode's trusted evaluation will.
  EvaluationPolicy policy;
};

/// The `Verify` tool for one task (one episode). Shares the driver and the verifier
/// (and so their caches and warm workers) with whoever else uses them.
template <Sandbox S = AnySandbox, Verifier V = HarnessVerifier>
class VerifyTool {
 public:
  VerifyTool(std::shared_ptr<CompileDriver<S>> driver, std::shared_ptr<V> verifier, Task task,
             VerifyToolOptions options)
      : driver_(std::move(driver)),
        verifier_(std::move(verifier)),
        task_(std::move(task)),
        options_(std::move(options)) {
    if (!driver_ || !verifier_) throw std::invalid_argument("VerifyTool needs a compile driver and a verifier");
    if (options_.build_directory.empty()) throw std::invalid_argument("VerifyTool needs a build directory");
  }

  [[nodiscard]] std::string_view name() const { return "Verify"; }

  [[nodiscard]] std::string_view description() const {
    return "Checks that ModelNew computes what Model computes. Builds kernels/ first if it changed, then runs "
           "Model and ModelNew on several fresh input sets (each twice) and compares every output: structure, "
           "type, shape, dtype, device and values within the tolerance. Also checks the rules: no torch compute "
           "inside forward, your kernels must run, no threads or unjoined streams left running, inputs unchanged "
           "unless Model changes them. Says CORRECT, or REJECTED with the reason and where it went wrong (for "
           "example the first mismatching index with the expected and the actual value).";
  }

  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"}, {"properties", nlohmann::json::object()}, {"additionalProperties", false}};
  }

  ToolResult invoke(const nlohmann::json& /*arguments*/, ToolContext& context) {
    CompileResult build;
    try {
      // The task's library policy where the verifier derives one, as the trusted evaluation builds.
      if constexpr (PolicyVerifier<V>)
        build = driver_->build(
            context.workspace(), options_.build_directory,
            verifier_->library_policy(task_, options_.policy).intersection(driver_->options().libraries));
      else if constexpr (LibraryPolicyVerifier<V>)
        build = driver_->build(context.workspace(), options_.build_directory,
                               verifier_->library_policy(task_).intersection(driver_->options().libraries));
      else
        build = driver_->build(context.workspace(), options_.build_directory);
    } catch (const std::exception& error) {
      return ToolResult::error(std::string("The build environment failed (not your code): ") + error.what(),
                               {{"environment_error", true}});
    }
    if (!build.succeeded)
      return ToolResult::error(
          "Not verified: the build failed.\n" + describe_compile_result(build, options_.max_diagnostics),
          {{"stage", "compile"}, {"correct", false}});
    VerificationResult result;
    try {
      const Candidate candidate{context.workspace(), options_.build_directory};
      if constexpr (PolicyVerifier<V>)
        result = verifier_->verify(task_, candidate, options_.policy);
      else
        result = verifier_->verify(task_, candidate);
    } catch (const std::exception& error) {
      return ToolResult::error(std::string("The verifier failed (not your code): ") + error.what(),
                               {{"environment_error", true}});
    }
    nlohmann::json metadata = {{"stage", "verify"},
                               {"correct", result.correct},
                               {"checks_passed", result.checks_passed},
                               {"checks_total", result.checks_total},
                               {"duration_ms", static_cast<double>(result.duration.count())}};
    if (result.rejection) metadata["reason"] = to_string(result.rejection->reason);
    std::string text = describe_verification(result, options_.output_limit);
    if (result.correct) return ToolResult::success(std::move(text), std::move(metadata));
    return ToolResult::error(std::move(text), std::move(metadata));
  }

 private:
  std::shared_ptr<CompileDriver<S>> driver_;
  std::shared_ptr<V> verifier_;
  Task task_;
  VerifyToolOptions options_;
};

}  // namespace cuda_agent
