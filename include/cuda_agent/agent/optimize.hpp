// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `optimize`: one complete episode on one task with the library's own parts, the way the
/// `cuda-agent optimize` command runs it.
///
/// ```
/// <output>/workspace/        the agent's workspace (SKILL.md, model.py, kernels/, model_new.py)
/// <output>/trajectory.jsonl  every event of the episode (resumable, replayable)
/// <output>/best/             the best candidate's files, as the trusted evaluation scored them
/// <output>/report.md, report.json
/// <output>/work/             builds, the harness, pristine evaluation copies
/// ```
///
/// The model works with Bash, Glob, Grep, Read, Edit, MultiEdit and Write in a bubblewrap
/// sandbox bound to its workspace, plus the task tools Compile, Verify and Profile.
/// Trusted scoring is the `TrustedEvaluator`: compile driver, warm harness workers, and,
/// on a GPU, the timing profiler against eager PyTorch and torch.compile. On the CPU
/// (device "cpu", candidates as C++ extensions) nothing is timed, so a correct candidate
/// earns reward 1 under the milestone policy; rewards 2 and 3 need a GPU.

#include <cstdlib>      // getenv
#include <filesystem>   // path, exists, create_directories
#include <functional>   // function
#include <memory>       // make_shared, shared_ptr
#include <optional>     // optional
#include <stdexcept>    // invalid_argument
#include <stop_token>   // stop_token
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move, make_pair
#include <vector>       // vector

#include <unistd.h>  // geteuid

#include "cuda_agent/agent/agent_loop.hpp"
#include "cuda_agent/agent/agent_observer.hpp"
#include "cuda_agent/compile/compile_driver.hpp"
#include "cuda_agent/compile/compile_tool.hpp"
#include "cuda_agent/detail/python_interpreter.hpp"
#include "cuda_agent/evaluate/reward_policies.hpp"
#include "cuda_agent/evaluate/trusted_evaluator.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/profile/harness_profiler.hpp"
#include "cuda_agent/profile/profile_tool.hpp"
#include "cuda_agent/profile/worker_timing_launcher.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/sandbox/bubblewrap_sandbox.hpp"
#include "cuda_agent/sandbox/process_sandbox.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tasks/workspace.hpp"
#include "cuda_agent/tools/tools.hpp"
#include "cuda_agent/verify/harness_verifier.hpp"
#include "cuda_agent/verify/verify_tool.hpp"

namespace cuda_agent {

struct OptimizeOptions {
  /// Where everything goes (see the file comment). Required; the sandbox users must be
  /// able to reach it (not under a 0700 home directory).
  std::filesystem::path output_directory;
  /// "cuda" or "cpu"; empty: "cuda" when /dev/nvidia<gpu> exists, else "cpu".
  std::string device;
  /// The GPU (device minor) for device "cuda".
  int gpu = 0;
  /// Python with torch. Empty: `$CUDA_AGENT_PYTHON`, else python3 on PATH.
  std::filesystem::path python;
  /// The compile driver's object cache. Empty: `default_compile_cache_directory()`.
  std::filesystem::path compile_cache_directory;
  /// Budgets, context, sampling. `output_directory` is set from the field above.
  AgentOptions agent;
  /// Time correct candidates against eager and torch.compile in the trusted evaluation,
  /// and let the Profile tool time them (device "cuda" only).
  bool timing = true;
  double timing_seconds = 5.0;
  /// Run the model's commands and the builds WITHOUT bubblewrap (ProcessSandbox). Only for
  /// hosts that trust the model; never a fallback.
  bool unconfined = false;
  /// Continue the episode whose trajectory is in the output directory.
  bool resume = false;
  /// Short lines about setup and evaluation ("starting the harness workers", ...).
  std::function<void(std::string_view)> progress;
  /// Watch the episode; not owned.
  std::vector<AgentObserver*> observers;
  std::stop_token cancellation;
};

struct OptimizeResult {
  EpisodeResult episode;
  /// The device the episode ran on.
  std::string device;
  /// Whether correct candidates were timed (device "cuda" with timing on).
  bool timed = false;
  std::filesystem::path workspace;
};

/// The device `requested` names, or the one this machine has when it is empty.
[[nodiscard]] inline std::string resolve_device(const std::string& requested, int gpu = 0) {
  if (requested == "cuda" || requested == "cpu") return requested;
  if (!requested.empty() && requested != "auto")
    throw std::invalid_argument("the device is \"cuda\", \"cpu\" or \"auto\", not \"" + requested + "\"");
  return std::filesystem::exists("/dev/nvidia" + std::to_string(gpu)) ? "cuda" : "cpu";
}

namespace detail {

template <Sandbox S>
OptimizeResult run_optimization(const Task& task, AnyLlmClient client, OptimizeOptions options,
                                const std::function<S(SandboxOptions)>& make_sandbox) {
  OptimizeResult outcome;
  outcome.device = options.device;
  const std::filesystem::path output = std::filesystem::absolute(options.output_directory).lexically_normal();
  const std::filesystem::path work = output / "work";
  outcome.workspace = output / "workspace";
  auto note = [&](std::string_view line) {
    if (options.progress) options.progress(line);
  };

  if (options.resume) {
    if (!std::filesystem::is_directory(outcome.workspace))
      throw std::invalid_argument("cannot resume: " + outcome.workspace.string() + " does not exist");
  } else {
    if (std::filesystem::exists(output / "trajectory.jsonl"))
      throw std::invalid_argument("the output directory " + output.string() +
                                  " already holds an episode: choose another directory, or resume it");
    make_open_directory(output);
    WorkspaceOptions workspace_options;
    workspace_options.device = outcome.device;
    // The loop reopens the workspace by its path; the description returned here is not needed.
    (void)materialize_workspace(task, outcome.workspace, workspace_options);
  }
  for (const char* name : {"", "build", "evaluations", "harness"}) make_open_directory(work / name);
  // The scripts the Profile tool runs, fresh from this build (a resumed run may be older).
  std::error_code ignored;
  std::filesystem::remove_all(work / "tool-harness", ignored);
  make_open_directory(work / "tool-harness");
  write_embedded_resources("harness/", work / "tool-harness");

  const std::filesystem::path python = configured_python(options.python);
  const bool cuda = outcome.device == "cuda";

  // The builds (the model's and the trusted ones) run in a sandbox bound to work/.
  SandboxOptions build_sandbox;
  build_sandbox.workspace = work;
  if (cuda) build_sandbox.gpus = {options.gpu};
  CompileOptions compile;
  compile.device = outcome.device;
  compile.python = python;
  compile.cache_directory = options.compile_cache_directory;
  compile.gpu_index = options.gpu;
  compile.progress = options.progress;
  if (::geteuid() == 0) {
    compile.sandbox_user = sandbox_identity(build_sandbox);
  }
  auto compiler = std::make_shared<CompileDriver<S>>(make_sandbox(build_sandbox), compile);

  // One pair of warm harness workers serves the Verify tool and the trusted evaluation:
  // each request forks a fresh child, so nothing of one candidate run outlives it.
  HarnessOptions harness;
  harness.device = outcome.device;
  harness.python = python;
  harness.work_directory = work / "harness";
  harness.gpus = {options.gpu};
  harness.progress = options.progress;
  // The workers are confined the way the episode's own commands are.
  harness.sandbox_factory = [make_sandbox](SandboxOptions sandbox) {
    return AnySandbox(make_sandbox(std::move(sandbox)));
  };
  auto verifier = std::make_shared<HarnessVerifier>(std::move(harness), VerificationPolicy{});

  outcome.timed = cuda && options.timing;
  HarnessProfilerOptions timing;
  timing.device = outcome.device;
  timing.device_index = options.gpu;
  timing.budget.seconds = options.timing_seconds;
  timing.baseline_cache_directory = work / "baselines";
  std::optional<HarnessProfiler> tool_timing;
  std::optional<AnyProfiler> trusted_timing;
  if (outcome.timed) {
    tool_timing.emplace(timing, WorkerTimingLauncher(verifier));
    trusted_timing.emplace(HarnessProfiler(timing, WorkerTimingLauncher(verifier)));
  }
  TrustedEvaluatorOptions evaluator_options;
  evaluator_options.work_directory = work / "evaluations";
  evaluator_options.progress = options.progress;
  TrustedEvaluator<SharedVerifier<HarnessVerifier>, S> evaluator(compiler, SharedVerifier<HarnessVerifier>(verifier),
                                                                 std::move(trusted_timing), evaluator_options);

  // The model's sandbox: its workspace read-write (SKILL.md and model.py read-only), the
  // harness scripts the Profile tool runs read-only.
  SandboxOptions agent_sandbox_options;
  agent_sandbox_options.workspace = outcome.workspace;
  agent_sandbox_options.protected_paths = {outcome.workspace / "SKILL.md", outcome.workspace / "model.py"};
  agent_sandbox_options.mounts.push_back(
      Mount{work / "tool-harness", work / "tool-harness", Mount::Access::read_only, false});
  if (cuda) agent_sandbox_options.gpus = {options.gpu};
  S agent_sandbox = make_sandbox(agent_sandbox_options);

  ToolRegistry tools = standard_tools(agent_sandbox);
  CompileToolOptions compile_tool;
  compile_tool.build_directory = work / "build";
  tools.add(CompileTool<S>(compiler, compile_tool));
  VerifyToolOptions verify_tool;
  verify_tool.build_directory = work / "build";
  tools.add(VerifyTool<S, HarnessVerifier>(compiler, verifier, task, verify_tool));
  ProfileToolOptions profile_tool;
  profile_tool.python = python;
  profile_tool.harness_directory = work / "tool-harness";
  if (!cuda) profile_tool.environment.set("CUDA_VISIBLE_DEVICES", "");
  tools.add(ProfileTool<S>(agent_sandbox, profile_tool, tool_timing ? &*tool_timing : nullptr, &task));

  AgentOptions agent = options.agent;
  agent.output_directory = output;
  AgentLoop loop(std::move(client), std::move(tools), SandboxRef(agent_sandbox), std::move(evaluator),
                 MilestoneReward{}, std::move(agent));
  for (AgentObserver* observer : options.observers)
    if (observer) loop.add_observer(*observer);
  note(options.resume ? "resuming the episode" : "starting the episode");
  outcome.episode = options.resume ? loop.resume(task, outcome.workspace, options.cancellation)
                                   : loop.run(task, outcome.workspace, options.cancellation);
  return outcome;
}

}  // namespace detail

/// Runs one episode of `client` on `task` (see the file comment). Throws
/// `std::invalid_argument` for unusable options and `SandboxError` when bubblewrap cannot
/// confine the model's commands here (it says what is missing).
[[nodiscard]] inline OptimizeResult optimize(const Task& task, AnyLlmClient client, OptimizeOptions options) {
  if (options.output_directory.empty())
    throw std::invalid_argument("optimize: say where the outputs go (OptimizeOptions::output_directory)");
  options.device = resolve_device(options.device, options.gpu);
  if (options.unconfined)
    return detail::run_optimization<ProcessSandbox>(
        task, std::move(client), std::move(options),
        [](SandboxOptions sandbox) { return ProcessSandbox(std::move(sandbox)); });
  return detail::run_optimization<AnySandbox>(task, std::move(client), std::move(options), [](SandboxOptions sandbox) {
    return make_default_sandbox(std::move(sandbox));
  });
}

}  // namespace cuda_agent
