// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Profile task tool: shows the model where the time goes (the top kernels of the
/// reference model and of its candidate, from torch.profiler) and, when a timing profiler
/// is configured, how the candidate compares with eager and torch.compile. It informs the
/// model only: rewards come from the trusted evaluation.

#include <algorithm>    // clamp
#include <chrono>       // milliseconds
#include <cstddef>      // size_t
#include <filesystem>   // path
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move

#include <nlohmann/json.hpp>

#include "cuda_agent/process.hpp"
#include "cuda_agent/profile/harness_profiler.hpp"
#include "cuda_agent/profile/profile_report.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tool.hpp"

namespace cuda_agent {

struct ProfileToolOptions {
  /// The interpreter and the harness directory (holding profile_kernels.py), as paths
  /// inside the sandbox.
  std::filesystem::path python;
  std::filesystem::path harness_directory;
  /// Relative to the workspace: the reference, and where the Compile tool builds.
  std::string reference_file = "model.py";
  std::string build_directory = "build";
  std::chrono::milliseconds timeout{300'000};
  /// Output above this is cut in the middle.
  std::size_t max_output_bytes = 30'000;
  Environment environment;
};

/// Holds a reference to the sandbox (and to the optional timing profiler and task), which
/// must outlive the tool.
template <Sandbox S>
class ProfileTool {
 public:
  ProfileTool(S& sandbox, ProfileToolOptions options, HarnessProfiler* timing = nullptr, const Task* task = nullptr)
      : sandbox_(&sandbox), options_(std::move(options)), timing_(timing), task_(task) {}

  [[nodiscard]] std::string_view name() const { return "Profile"; }

  [[nodiscard]] std::string_view description() const {
    return "Profiles the task's reference model and your candidate (ModelNew, built from kernels/) with "
           "torch.profiler and returns, for each, a table of its top GPU kernels: name, calls per forward, "
           "total and mean time per forward, and share of the total. Use it first to see what the reference "
           "spends its time on, and again after each change to see what your kernels cost.\n\n"
           "- target: \"reference\", \"candidate\" or \"both\" (default). The candidate must be compiled first.\n"
           "- compile: also profile torch.compile of the reference (the baseline to beat; slow the first time).\n"
           "- timing: also time the candidate against eager and torch.compile in interleaved rounds and report "
           "speedups with confidence intervals and verdicts (FASTER needs the whole interval at least 5% faster); "
           "on by default for the candidate where this environment can time. Informational: the reward comes "
           "from the final trusted evaluation.\n"
           "- top: how many kernels to list per model (default 15).";
  }

  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"},
            {"properties",
             {{"target",
               {{"type", "string"},
                {"enum", {"reference", "candidate", "both"}},
                {"description", "which model to profile (default both)"}}},
              {"compile", {{"type", "boolean"}, {"description", "also profile torch.compile of the reference"}}},
              {"timing", {{"type", "boolean"}, {"description", "also time the candidate against the baselines"}}},
              {"top",
               {{"type", "integer"},
                {"minimum", 1},
                {"maximum", 100},
                {"description", "kernels listed per model (default 15)"}}}}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    if (!arguments.is_object()) return ToolResult::error("Error: the arguments must be a JSON object.");
    const std::string target = arguments.value("target", std::string("both"));
    if (target != "reference" && target != "candidate" && target != "both")
      return ToolResult::error("Error: target must be \"reference\", \"candidate\" or \"both\", not \"" + target +
                               "\".");
    const auto top_value = arguments.find("top");
    if (top_value != arguments.end() && !top_value->is_number_integer())
      return ToolResult::error("Error: top must be an integer between 1 and 100.");
    const int top = std::clamp(arguments.value("top", 15), 1, 100);
    const bool compile = arguments.value("compile", false);
    const bool timing_available = timing_ != nullptr && task_ != nullptr;
    const bool timing = arguments.value("timing", timing_available && target != "reference");
    if (timing && !timing_available)
      return ToolResult::error("Error: timing is not available in this environment; profile kernels without it.");

    Command command;
    command.argv = {options_.python.string(),
                    (options_.harness_directory / "profile_kernels.py").string(),
                    "--target",
                    target,
                    "--reference",
                    options_.reference_file,
                    "--candidate-dir",
                    ".",
                    "--build-dir",
                    options_.build_directory,
                    "--top",
                    std::to_string(top)};
    if (compile) command.argv.push_back("--compile");
    command.environment = options_.environment;
    command.environment.set("PYTHONDONTWRITEBYTECODE", "1");
    command.working_directory = context.workspace();
    command.timeout = options_.timeout;
    command.output_limit = options_.max_output_bytes;
    command.merge_stderr = true;
    command.cancellation = context.cancellation();
    const CommandResult result = sandbox_->run(command);

    std::string text = result.standard_output.text;
    nlohmann::json metadata = {{"exit", describe_exit(result)}, {"target", target}, {"compile", compile}};
    bool failed = !result.succeeded();
    if (failed) text += "\n(profiling " + describe_exit(result) + ")";
    if (timing) {
      Candidate candidate;
      candidate.source_directory = context.workspace();
      candidate.build_directory = context.workspace() / options_.build_directory;
      const ProfileResult profile = timing_->profile(*task_, candidate);
      text += "\n\nTiming against the baselines:\n" + describe_profile(profile);
      metadata["timing"] = profile;
      failed = failed || profile.rejection.has_value();
    }
    return failed ? ToolResult::error(std::move(text), std::move(metadata))
                  : ToolResult::success(std::move(text), std::move(metadata));
  }

 private:
  S* sandbox_;
  ProfileToolOptions options_;
  HarnessProfiler* timing_;
  const Task* task_;
};

}  // namespace cuda_agent
