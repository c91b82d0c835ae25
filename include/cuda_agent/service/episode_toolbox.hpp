// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `standard_episode_toolbox`: the tools `cuda-agent optimize` gives its model (Bash, Glob,
/// Grep, Read, Edit, MultiEdit, Write, and the task tools Compile, Verify and Profile), made
/// for each episode of an `EpisodeService`.
///
/// Per episode: a sandbox bound to its workspace (SKILL.md and model.py read-only), and a
/// compile driver whose builds run in a sandbox bound to the episode's work directory, so
/// that one episode's commands and builds never see another's files. Shared by all: the
/// compile cache, and the warm harness workers of the Verify tool (one verification at a
/// time; they are the same kind the trusted evaluation uses, but not the pool's). The Verify
/// and Profile tools of all episodes take turns: a timing session must have the workers to
/// itself, and a GPU timed beside other work would report a slowdown that is not the
/// candidate's.

#include <filesystem>   // path
#include <functional>   // function
#include <memory>       // make_shared, make_unique, shared_ptr
#include <mutex>        // mutex, lock_guard
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move

#include <unistd.h>  // geteuid

#include "cuda_agent/compile/compile_driver.hpp"
#include "cuda_agent/compile/compile_tool.hpp"
#include "cuda_agent/detail/harness_session.hpp"
#include "cuda_agent/detail/python_interpreter.hpp"
#include "cuda_agent/profile/harness_profiler.hpp"
#include "cuda_agent/profile/profile_tool.hpp"
#include "cuda_agent/profile/worker_timing_launcher.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/sandbox/bubblewrap_sandbox.hpp"
#include "cuda_agent/service/episode_service.hpp"
#include "cuda_agent/tools/tools.hpp"
#include "cuda_agent/verify/harness_verifier.hpp"
#include "cuda_agent/verify/verify_tool.hpp"

namespace cuda_agent {

namespace detail {

/// `tool`, whose calls wait for those of every other tool that shares `turns`.
template <Tool T>
class TakingTurns {
 public:
  TakingTurns(T tool, std::shared_ptr<std::mutex> turns) : tool_(std::move(tool)), turns_(std::move(turns)) {}
  [[nodiscard]] std::string_view name() const { return tool_.name(); }
  [[nodiscard]] std::string_view description() const { return tool_.description(); }
  [[nodiscard]] nlohmann::json parameters() const { return tool_.parameters(); }
  ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    const std::lock_guard turn(*turns_);
    return tool_.invoke(arguments, context);
  }

 private:
  T tool_;
  std::shared_ptr<std::mutex> turns_;
};

}  // namespace detail

struct StandardEpisodeToolboxOptions {
  /// Where the shared parts live: the Verify tool's harness workers, the scripts the
  /// Profile tool runs. Required.
  std::filesystem::path work_directory;
  /// "cuda" or "cpu", and the GPU the episodes' commands, builds and checks use.
  std::string device = "cpu";
  int gpu = 0;
  /// Python with torch. Empty: `$CUDA_AGENT_PYTHON`, else python3 on PATH.
  std::filesystem::path python;
  /// The compile driver's object cache. Empty: `default_compile_cache_directory()`.
  std::filesystem::path compile_cache_directory;
  /// What the Verify tool checks with (the trusted evaluation's policy, so that a candidate
  /// the tool passes is not refused for a tolerance it never saw); an episode's own choices
  /// (`EpisodeSetup::policy`: its tolerance profile, its library policy) take the place of
  /// these for its calls.
  VerificationPolicy verification;
  /// Let the Profile tool time candidates against eager and torch.compile (device "cuda").
  bool timing = true;
  double timing_seconds = 2.0;
  /// Makes every sandbox. Empty: bubblewrap (`make_default_sandbox`); a host that trusts the
  /// model may give `ProcessSandbox`, never by default.
  std::function<AnySandbox(SandboxOptions)> make_sandbox;
  StandardToolOptions tools;
};

/// The factory an `EpisodeService` takes. Throws `std::invalid_argument` for unusable options.
[[nodiscard]] inline EpisodeToolboxFactory standard_episode_toolbox(StandardEpisodeToolboxOptions options) {
  if (options.work_directory.empty())
    throw std::invalid_argument("standard_episode_toolbox: say where its shared files go (work_directory)");
  if (options.device != "cuda" && options.device != "cpu")
    throw std::invalid_argument("standard_episode_toolbox: the device is \"cuda\" or \"cpu\", not \"" + options.device +
                                "\"");
  if (!options.make_sandbox)
    options.make_sandbox = [](SandboxOptions sandbox) { return make_default_sandbox(std::move(sandbox)); };
  options.python = detail::configured_python(options.python);
  options.work_directory = std::filesystem::absolute(options.work_directory).lexically_normal();

  // What every episode shares, alive as long as the factory or any toolbox it made.
  struct Shared {
    StandardEpisodeToolboxOptions options;
    std::filesystem::path tool_harness;
    std::shared_ptr<HarnessVerifier> verifier;
    std::optional<HarnessProfiler> timing;
    std::shared_ptr<std::mutex> worker_turns = std::make_shared<std::mutex>();
  };
  auto shared = std::make_shared<Shared>();
  shared->options = std::move(options);
  const StandardEpisodeToolboxOptions& common = shared->options;
  detail::make_open_directory(common.work_directory);
  shared->tool_harness = common.work_directory / "tool-harness";
  std::error_code ignored;
  std::filesystem::remove_all(shared->tool_harness, ignored);
  detail::make_open_directory(shared->tool_harness);
  write_embedded_resources("harness/", shared->tool_harness);

  HarnessOptions harness;
  harness.device = common.device;
  harness.python = common.python;
  harness.work_directory = common.work_directory / "harness";
  harness.gpus = {common.gpu};
  harness.sandbox_factory = common.make_sandbox;
  shared->verifier = std::make_shared<HarnessVerifier>(std::move(harness), common.verification);
  if (common.device == "cuda" && common.timing) {
    HarnessProfilerOptions timing;
    timing.device = common.device;
    timing.device_index = common.gpu;
    timing.budget.seconds = common.timing_seconds;
    timing.baseline_cache_directory = common.work_directory / "baselines";
    timing.extra_allowed_operations = common.verification.extra_allowed_operations;
    shared->timing.emplace(std::move(timing), WorkerTimingLauncher(shared->verifier));
  }

  return [shared](const EpisodeSetup& setup) {
    const StandardEpisodeToolboxOptions& settings = shared->options;
    const bool cuda = settings.device == "cuda";
    EpisodeToolbox toolbox;

    SandboxOptions commands;
    commands.workspace = setup.workspace.root;
    commands.protected_paths = setup.workspace.absolute_protected_paths();
    commands.mounts.push_back(Mount{shared->tool_harness, shared->tool_harness, Mount::Access::read_only, false});
    if (cuda) commands.gpus = {settings.gpu};
    toolbox.sandbox = std::make_unique<AnySandbox>(settings.make_sandbox(commands));

    SandboxOptions builds;
    builds.workspace = setup.work_directory;
    if (cuda) builds.gpus = {settings.gpu};
    CompileOptions compile;
    compile.device = settings.device;
    compile.python = settings.python;
    compile.cache_directory = settings.compile_cache_directory;
    compile.gpu_index = settings.gpu;
    if (::geteuid() == 0) compile.sandbox_user = sandbox_identity(builds);
    auto compiler = std::make_shared<CompileDriver<AnySandbox>>(settings.make_sandbox(builds), compile);
    const std::filesystem::path build_directory = setup.work_directory / "build";
    detail::make_open_directory(build_directory);

    toolbox.tools = standard_tools(*toolbox.sandbox, settings.tools);
    CompileToolOptions compile_tool;
    compile_tool.build_directory = build_directory;
    toolbox.tools.add(CompileTool<AnySandbox>(compiler, compile_tool));
    VerifyToolOptions verify_tool;
    verify_tool.build_directory = build_directory;
    verify_tool.policy = setup.policy;
    toolbox.tools.add(detail::TakingTurns(
        VerifyTool<AnySandbox, HarnessVerifier>(compiler, shared->verifier, setup.task, verify_tool),
        shared->worker_turns));
    ProfileToolOptions profile_tool;
    profile_tool.python = settings.python;
    profile_tool.harness_directory = shared->tool_harness;
    if (!cuda) profile_tool.environment.set("CUDA_VISIBLE_DEVICES", "");
    toolbox.tools.add(
        detail::TakingTurns(ProfileTool<AnySandbox>(*toolbox.sandbox, profile_tool,
                                                    shared->timing ? &*shared->timing : nullptr, &setup.task),
                            shared->worker_turns));
    toolbox.resources = shared;
    return toolbox;
  };
}

}  // namespace cuda_agent
