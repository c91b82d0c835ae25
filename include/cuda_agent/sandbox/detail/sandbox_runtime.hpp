// SPDX-License-Identifier: Apache-2.0
#pragma once

// What BubblewrapSandbox and ProcessSandbox share around one command: the environment,
// the limits in force and how each is enforced (cgroup v2 leaf, rlimits, timer), which
// ones the command hit, and the cgroup leaf's lifetime.

#include <algorithm>   // min, max
#include <chrono>      // seconds, microseconds, milliseconds
#include <csignal>     // SIGXCPU, SIGXFSZ, SIGKILL
#include <cstdint>     // uint64_t
#include <filesystem>  // path
#include <memory>      // unique_ptr
#include <optional>    // optional
#include <random>      // random_device
#include <string>      // string, to_string
#include <utility>     // move
#include <vector>      // vector

#include <sys/resource.h>  // RLIMIT_*, getrlimit
#include <unistd.h>        // geteuid, getpid

#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/cgroup_v2.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"

namespace cuda_agent::detail {

/// The command's environment: allowlisted host variables, then the sandbox's fixed ones,
/// then the command's own.
inline Environment compose_environment(const SandboxOptions& options, const Environment& command) {
  Environment environment = Environment::from_current(options.environment_allowlist);
  for (const auto& [name, value] : options.environment.variables()) environment.set(name, value);
  for (const auto& [name, value] : command.variables()) environment.set(name, value);
  return environment;
}

/// Each field of the command's limits, or else the sandbox default.
inline ResourceLimits merge_limits(const ResourceLimits& command, const ResourceLimits& defaults) {
  ResourceLimits limits;
  limits.cpu_time = command.cpu_time ? command.cpu_time : defaults.cpu_time;
  limits.file_size_bytes = command.file_size_bytes ? command.file_size_bytes : defaults.file_size_bytes;
  limits.open_files = command.open_files ? command.open_files : defaults.open_files;
  limits.memory_bytes = command.memory_bytes ? command.memory_bytes : defaults.memory_bytes;
  limits.processes = command.processes ? command.processes : defaults.processes;
  return limits;
}

inline std::string byte_count(std::uint64_t bytes) {
  if (bytes % (std::uint64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes % (std::uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

/// How a sandbox can use cgroups, decided once when it is constructed.
struct CgroupSupport {
  std::optional<CgroupParent> parent;
  /// Why commands get no leaf (cgroups disabled, none usable); empty with a parent.
  std::string unavailable_reason;

  static CgroupSupport discover(const SandboxOptions& options) {
    if (!options.use_cgroups) return {std::nullopt, "cgroups are disabled (SandboxOptions::use_cgroups)"};
    CgroupDiscovery discovery = discover_cgroup_parent(options.cgroup_parent);
    return {std::move(discovery.parent), std::move(discovery.reason)};
  }

  /// A fresh leaf for one command, or nothing (with `why_not` set) where there is no
  /// parent. An explicitly configured parent that fails throws instead.
  [[nodiscard]] std::unique_ptr<CgroupLeaf> create_leaf(const ResourceLimits& limits, bool configured,
                                                        std::string& why_not) const {
    if (!parent) {
      why_not = unavailable_reason;
      return nullptr;
    }
    std::random_device random;
    const std::string name =
        "cuda-agent-" + std::to_string(::getpid()) + "-" + std::to_string(random()) + "-" + std::to_string(random());
    try {
      return std::make_unique<CgroupLeaf>(*parent, name, limits.memory_bytes, limits.processes);
    } catch (const SandboxError& error) {
      if (configured) throw;
      why_not = error.what();
      return nullptr;
    }
  }
};

/// A command's cgroup leaf (or none) and why memory and processes are not limited by it.
struct CommandCgroup {
  std::unique_ptr<CgroupLeaf> leaf;
  std::string memory_note;
  std::string processes_note;
};

/// Creates the leaf for one command where cgroups are usable. An explicitly configured
/// parent that fails throws; otherwise the failure becomes the notes.
inline CommandCgroup make_command_cgroup(const CgroupSupport& support, const ResourceLimits& limits, bool configured) {
  CommandCgroup cgroup;
  std::string why_not;
  cgroup.leaf = support.create_leaf(limits, configured, why_not);
  if (cgroup.leaf) {
    cgroup.memory_note = support.parent->memory_note;
    cgroup.processes_note = support.parent->pids_note;
  } else {
    cgroup.memory_note = cgroup.processes_note = why_not;
  }
  return cgroup;
}

/// What the sandbox knows when it decides how to enforce each limit.
struct LimitContext {
  const CgroupLeaf* leaf = nullptr;
  /// Why no cgroup limits memory, or the number of processes (no leaf, or no controller).
  std::string memory_note;
  std::string processes_note;
  bool gpu = false;
  SandboxIdentity identity{};
  std::chrono::milliseconds timeout{0};
  /// How the deadline reaches every process ("PID namespace", "process group", ...).
  std::string wall_time_mechanism;
  std::string wall_time_note;
  /// Added to the file-size status: what bounds the disk space a command can take.
  std::string disk_note;
};

/// The context every sandbox starts from; each adds its own wall-time and disk notes.
inline LimitContext make_limit_context(const CommandCgroup& cgroup, const SandboxOptions& options,
                                       const SandboxIdentity& identity, const Command& command) {
  LimitContext context;
  context.leaf = cgroup.leaf.get();
  context.memory_note = cgroup.memory_note;
  context.processes_note = cgroup.processes_note;
  context.gpu = !options.gpus.empty();
  context.identity = identity;
  context.timeout = command.timeout;
  return context;
}

struct LimitPlan {
  std::vector<ChildSetup::Limit> rlimits;
  std::vector<LimitStatus> statuses;
};

/// Sets `resource` to `value` (soft) and `hard`, clamped to what this process may grant
/// when it is not root. Returns a note when clamped.
inline std::string add_rlimit(LimitPlan& plan, int resource, rlim_t value, rlim_t hard) {
  rlimit current{};
  std::string note;
  if (::geteuid() != 0 && ::getrlimit(resource, &current) == 0 && current.rlim_max != RLIM_INFINITY &&
      hard > current.rlim_max) {
    hard = current.rlim_max;
    value = std::min(value, hard);
    note = "clamped to this process's hard limit " + std::to_string(hard) + "; ";
  }
  plan.rlimits.push_back({resource, value, hard});
  return note;
}

/// Decides, for each limit in force, how it is enforced, and says so.
inline LimitPlan plan_limits(const ResourceLimits& limits, const LimitContext& context) {
  LimitPlan plan;
  // No core files: they would land in the workspace, or in a root-run crash collector.
  plan.rlimits.push_back({RLIMIT_CORE, 0, 0});

  if (context.timeout.count() > 0)
    plan.statuses.push_back({LimitKind::wall_time, true, context.wall_time_mechanism, context.wall_time_note});
  else
    plan.statuses.push_back({LimitKind::wall_time, false, "", "no deadline was set (Command::timeout is 0)"});

  if (limits.cpu_time) {
    const auto seconds = static_cast<rlim_t>(std::max<std::chrono::seconds::rep>(limits.cpu_time->count(), 1));
    // SIGXCPU at the soft limit, SIGKILL one second later for a process that catches it.
    const std::string note = add_rlimit(plan, RLIMIT_CPU, seconds, seconds + 1);
    plan.statuses.push_back(
        {LimitKind::cpu_time, true, "rlimit RLIMIT_CPU",
         note + "per process: SIGXCPU after " + std::to_string(seconds) + " s of CPU time, SIGKILL a second later"});
  }
  if (limits.file_size_bytes) {
    const auto bytes = static_cast<rlim_t>(*limits.file_size_bytes);
    const std::string note = add_rlimit(plan, RLIMIT_FSIZE, bytes, bytes);
    plan.statuses.push_back({LimitKind::file_size, true, "rlimit RLIMIT_FSIZE",
                             note + "per file: a write past " + byte_count(*limits.file_size_bytes) +
                                 " raises SIGXFSZ. " + context.disk_note});
  }
  if (limits.open_files) {
    const auto count = static_cast<rlim_t>(*limits.open_files);
    const std::string note = add_rlimit(plan, RLIMIT_NOFILE, count, count);
    plan.statuses.push_back({LimitKind::open_files, true, "rlimit RLIMIT_NOFILE", note + "per process"});
  }

  if (limits.memory_bytes) {
    const std::string amount = byte_count(*limits.memory_bytes);
    if (context.leaf && context.leaf->memory_limited()) {
      plan.statuses.push_back({LimitKind::memory, true, "cgroup v2 memory.max",
                               amount + " for all processes together (tmpfs pages they write included), no swap; "
                                        "on excess the whole command is killed"});
    } else if (!context.gpu) {
      const auto bytes = static_cast<rlim_t>(*limits.memory_bytes);
      const std::string note = add_rlimit(plan, RLIMIT_DATA, bytes, bytes);
      plan.statuses.push_back({LimitKind::memory, false, "rlimit RLIMIT_DATA (partial)",
                               note + amount +
                                   " of private data per process (allocations fail beyond it); shared memory (memfd, "
                                   "/dev/shm, System V) and several processes together are not bounded. No cgroup v2 "
                                   "memory controller: " +
                                   context.memory_note});
    } else {
      plan.statuses.push_back(
          {LimitKind::memory, false, "",
           "not enforced: no cgroup v2 memory controller (" + context.memory_note +
               "), and no rlimit is applied to GPU commands (RLIMIT_AS breaks CUDA, which reserves tens of GB of "
               "address space). The deadline, the tmpfs sizes and the host's own memory cgroup or OOM killer are "
               "what contain a runaway allocation"});
    }
  }

  if (limits.processes) {
    const std::string count = std::to_string(*limits.processes);
    if (context.leaf && context.leaf->pids_limited()) {
      plan.statuses.push_back({LimitKind::processes, true, "cgroup v2 pids.max", count + " processes and threads"});
    } else if (context.identity.uid == 0) {
      plan.statuses.push_back({LimitKind::processes, false, "",
                               "not enforced: no cgroup v2 pids controller (" + context.processes_note +
                                   "), and RLIMIT_NPROC does not apply to root"});
    } else {
      const auto value = static_cast<rlim_t>(*limits.processes);
      const std::string note = add_rlimit(plan, RLIMIT_NPROC, value, value);
      plan.statuses.push_back({LimitKind::processes, true, "rlimit RLIMIT_NPROC",
                               note + count + " processes and threads of uid " + std::to_string(context.identity.uid) +
                                   " on the whole host, those of other commands running as that uid included" +
                                   (context.identity.uid == ::geteuid() ? ", and this host process's own" : "") +
                                   ". No cgroup v2 pids controller: " + context.processes_note});
    }
  }
  return plan;
}

/// The command's working directory: the workspace, or a path relative to it, or as given.
inline std::filesystem::path working_directory_of(const Command& command, const std::filesystem::path& workspace) {
  if (command.working_directory.empty()) return workspace;
  return command.working_directory.is_absolute() ? command.working_directory : workspace / command.working_directory;
}

/// What both sandboxes start their process with: the command's input, deadline and
/// output handling, the planned rlimits, the cgroup leaf, a session of its own, and the
/// sandbox identity, taken before exec (so before bubblewrap starts, for that sandbox).
inline ProcessSpec sandbox_process_spec(const Command& command, const SandboxOptions& options,
                                        const SandboxIdentity& identity, const LimitPlan& plan,
                                        const CgroupLeaf* leaf) {
  ProcessSpec spec;
  spec.environment = compose_environment(options, command.environment);
  spec.stdin_data = command.stdin_data;
  spec.timeout = command.timeout;
  spec.kill_grace = options.kill_grace;
  spec.output_limit = command.output_limit;
  spec.merge_stderr = command.merge_stderr;
  spec.cancellation = command.cancellation;
  spec.child.rlimits = plan.rlimits;
  spec.child.new_session = true;
  spec.child.cgroup_procs_fd = leaf ? leaf->procs_fd() : -1;
  if (::geteuid() == 0) {
    spec.child.uid = identity.uid;
    spec.child.gid = identity.gid;
  }
  return spec;
}

/// The limits a finished command ran into. `signal` is the signal that ended it (for
/// bubblewrap recovered from the 128+N exit status it reports).
inline std::vector<LimitKind> detect_limit_hits(const ProcessResult& result, std::optional<int> signal,
                                                const ResourceLimits& limits, const CgroupLeaf::Events& events) {
  std::vector<LimitKind> hits;
  if (result.timed_out) hits.push_back(LimitKind::wall_time);
  const auto cpu_used = std::chrono::duration_cast<std::chrono::seconds>(result.user_cpu_time + result.system_cpu_time);
  if (limits.cpu_time && (signal == SIGXCPU || (signal == SIGKILL && cpu_used >= *limits.cpu_time)))
    hits.push_back(LimitKind::cpu_time);
  if (limits.file_size_bytes && signal == SIGXFSZ) hits.push_back(LimitKind::file_size);
  if (events.oom_kills > 0) hits.push_back(LimitKind::memory);
  if (events.pids_limit_hits > 0) hits.push_back(LimitKind::processes);
  return hits;
}

}  // namespace cuda_agent::detail
