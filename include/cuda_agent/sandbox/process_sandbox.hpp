// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `ProcessSandbox`: the `Sandbox` interface without confinement, for trusted commands
/// and for machines without namespaces. A command runs as the sandbox identity, in the
/// workspace, with the composed environment, its own session and process group, rlimits,
/// a cgroup v2 leaf where one is available, and a deadline. It sees the whole filesystem,
/// the network and every GPU; protected paths, mounts and hidden paths are not applied.
/// Every result says `confined == false` and `sandbox == "process"`.
///
/// Nothing selects it implicitly: `make_default_sandbox` never falls back to it. A host
/// constructs it by name when it means to run commands unconfined.

#include <algorithm>   // max
#include <filesystem>  // path
#include <stdexcept>   // invalid_argument
#include <string>      // string
#include <utility>     // move

#include <unistd.h>  // geteuid, getegid

#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/sandbox_paths.hpp"
#include "cuda_agent/sandbox/detail/sandbox_runtime.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"

namespace cuda_agent {

class ProcessSandbox {
 public:
  /// Throws SandboxError when the workspace is missing or the identity unusable (a
  /// process that is not root can only run commands as itself).
  explicit ProcessSandbox(SandboxOptions options)
      : options_(std::move(options)), identity_(sandbox_identity(options_)) {
    if (options_.workspace.empty()) throw SandboxError("ProcessSandbox: SandboxOptions::workspace is empty");
    workspace_ = detail::normal_absolute(options_.workspace);
    if (!std::filesystem::is_directory(workspace_))
      throw SandboxError("ProcessSandbox: the workspace " + workspace_.string() + " is not a directory");
    if (::geteuid() != 0 && (identity_.uid != ::geteuid() || identity_.gid != ::getegid()))
      throw SandboxError("ProcessSandbox: this process (uid " + std::to_string(::geteuid()) +
                         ") is not root and cannot run commands as uid " + std::to_string(identity_.uid) + " gid " +
                         std::to_string(identity_.gid) + "; leave SandboxOptions::uid and gid unset");
    if (const auto reason = detail::unreachable_reason(workspace_, identity_.uid, identity_.gid))
      throw SandboxError("ProcessSandbox: the sandbox user cannot reach the workspace: " + *reason +
                         "; put workspaces where uid " + std::to_string(identity_.uid) + " can enter");
    cgroups_ = detail::CgroupSupport::discover(options_);
  }

  /// Runs one command. Safe to call from several threads at once.
  [[nodiscard]] CommandResult run(const Command& command) {
    if (command.argv.empty() || command.argv.front().empty())
      throw std::invalid_argument("ProcessSandbox::run: the command has no program");

    const ResourceLimits limits = detail::merge_limits(command.limits, options_.default_limits);
    CommandResult result;
    result.confined = false;
    result.sandbox = "process";

    // An unknown program is the command's failure, reported the way a shell would.
    if (!find_program(command.argv.front(), detail::compose_environment(options_, command.environment)))
      return cannot_execute(command, "cannot execute '" + command.argv.front() + "': not found in PATH", 127);

    const detail::CommandCgroup cgroup =
        detail::make_command_cgroup(cgroups_, limits, options_.cgroup_parent.has_value());
    detail::CgroupLeaf* leaf = cgroup.leaf.get();
    detail::LimitContext context = detail::make_limit_context(cgroup, options_, identity_, command);
    if (leaf) {
      context.wall_time_mechanism = "timer, process group, cgroup.kill";
      context.wall_time_note =
          "SIGTERM to the process group at the deadline, SIGKILL after the grace period; "
          "cgroup.kill then ends every descendant, also those that left the group";
    } else {
      context.wall_time_mechanism = "timer, process group";
      context.wall_time_note =
          "SIGTERM to the process group at the deadline, SIGKILL after the grace period. "
          "Descendants that left the group (setsid, daemons) are not killed: nothing confines "
          "them and no cgroup tracks them (" +
          cgroup.processes_note + ")";
    }
    context.disk_note = "Unconfined: the command can fill any filesystem its user may write to.";
    const detail::LimitPlan plan = detail::plan_limits(limits, context);
    result.limits = plan.statuses;

    ProcessSpec spec = detail::sandbox_process_spec(command, options_, identity_, plan, leaf);
    spec.argv = command.argv;
    spec.working_directory = detail::working_directory_of(command, workspace_);

    ProcessResult finished;
    try {
      finished = run_process(spec);
    } catch (const ProcessError& error) {
      if (std::string_view(error.what()).rfind("cannot execute", 0) == 0)
        return cannot_execute(command, error.what(), 126);
      throw SandboxError(std::string("ProcessSandbox: cannot start the command: ") + error.what());
    }
    static_cast<ProcessResult&>(result) = std::move(finished);

    detail::CgroupLeaf::Events events;
    if (leaf) {
      events = leaf->events();
      // The leaf also counts descendants that were never waited for.
      const detail::CgroupLeaf::Usage usage = leaf->usage();
      result.user_cpu_time = std::max(result.user_cpu_time, usage.user);
      result.system_cpu_time = std::max(result.system_cpu_time, usage.system);
      if (!leaf->kill_all(std::chrono::seconds(10)))
        throw SandboxError("ProcessSandbox: processes of the command were still alive 10 s after cgroup.kill (" +
                           leaf->directory().string() + ")");
    }
    result.limits_hit = detail::detect_limit_hits(result, result.signal, limits, events);
    return result;
  }

  [[nodiscard]] const SandboxOptions& options() const noexcept { return options_; }
  [[nodiscard]] SandboxIdentity identity() const noexcept { return identity_; }

 private:
  static CommandResult cannot_execute(const Command& command, const std::string& message, int exit_code) {
    CommandResult result;
    result.confined = false;
    result.sandbox = "process";
    result.exit_code = exit_code;
    CapturedOutput& stream = command.merge_stderr ? result.standard_output : result.standard_error;
    stream.text = message + "\n";
    stream.total_bytes = stream.text.size();
    return result;
  }

  SandboxOptions options_;
  SandboxIdentity identity_;
  std::filesystem::path workspace_;
  detail::CgroupSupport cgroups_;
};

static_assert(Sandbox<ProcessSandbox>);

}  // namespace cuda_agent
