// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What a sandbox confines commands to: the workspace, the read-only paths inside it,
/// extra mounts, the environment, the GPUs, the default limits and the unprivileged
/// identity commands run as. `BubblewrapSandbox` enforces all of it; `ProcessSandbox`
/// uses the workspace, environment, identity and limits only (it confines nothing).
///
/// Both sandboxes run commands as `sandbox_identity(options)`. A host running as root
/// hands the workspace to that identity once with `hand_over_to_sandbox` before the first
/// command, so that commands can write there.

#include <chrono>        // milliseconds
#include <cstdint>       // uint64_t
#include <filesystem>    // path
#include <optional>      // optional
#include <string>        // string
#include <system_error>  // system_error
#include <vector>        // vector

#include <sys/types.h>  // uid_t, gid_t
#include <unistd.h>     // geteuid, getegid

#include "cuda_agent/detail/ownership.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/sandbox_paths.hpp"

namespace cuda_agent {

/// An extra bind mount: a Python prefix, a harness directory, a compiler cache, or a
/// trusted copy of a file placed over a path inside the workspace.
struct Mount {
  enum class Access { read_only, read_write, device };
  std::filesystem::path source;
  /// Absolute path inside the sandbox. Inside the workspace it stacks on top of the
  /// workspace (a trusted copy); its parent directory must already exist there.
  std::filesystem::path destination;
  Access access = Access::read_only;
  /// Skip the mount when the source does not exist, instead of failing.
  bool optional = false;
};

/// The uid 65534 ("nobody") that a root host drops to unless told otherwise.
inline constexpr uid_t default_sandbox_uid = 65534;
inline constexpr gid_t default_sandbox_gid = 65534;

/// HOME and TMPDIR point into the sandbox's private /tmp; Python writes no bytecode into
/// read-only trees and ignores user site-packages.
[[nodiscard]] inline Environment default_sandbox_environment() {
  Environment environment;
  environment.set("HOME", "/tmp").set("TMPDIR", "/tmp");
  environment.set("PYTHONDONTWRITEBYTECODE", "1").set("PYTHONNOUSERSITE", "1");
  return environment;
}

/// Limits applied to every command unless the command sets its own. No CPU-time limit by
/// default: the wall-clock deadline of each command bounds it, and a per-process CPU limit
/// would kill long but legitimate compilations.
[[nodiscard]] inline ResourceLimits default_sandbox_limits() {
  ResourceLimits limits;
  limits.file_size_bytes = std::uint64_t{2} << 30;
  limits.open_files = 4096;
  limits.memory_bytes = std::uint64_t{8} << 30;
  // Counts threads too: PyTorch alone starts one per core for each pool.
  limits.processes = 1024;
  return limits;
}

/// Directories that commonly hold secrets readable by any user (home directories, the
/// host's sockets in /run, other users' files in /var/tmp): replaced by empty read-only
/// directories inside the sandbox.
[[nodiscard]] inline std::vector<std::filesystem::path> default_hidden_paths() {
  return {"/root", "/home", "/run", "/var/tmp", "/var/mail", "/var/spool", "/mnt", "/media", "/srv"};
}

struct SandboxOptions {
  /// Bound read-write at the same path (its canonical spelling, links resolved); the
  /// default working directory. Must exist.
  std::filesystem::path workspace;
  /// Inside the workspace (absolute, or relative to it); made read-only. Each must exist
  /// when a command starts. Their parent directories inside the workspace cannot be
  /// renamed while a command runs, so a protected file cannot be moved aside and replaced.
  std::vector<std::filesystem::path> protected_paths;
  /// Extra binds (python prefix, harness, caches), applied after the workspace.
  std::vector<Mount> mounts;
  /// Host variables passed through when set.
  std::vector<std::string> environment_allowlist{"PATH", "LANG", "LC_ALL", "TERM"};
  /// Fixed additions, over the allowlisted ones; a command's own variables go on top.
  Environment environment = default_sandbox_environment();
  /// The N of each /dev/nvidiaN to expose (the driver's minor number, "Device Minor" in
  /// /proc/driver/nvidia/gpus/*/information). Empty: no GPU.
  std::vector<int> gpus;
  /// Limits for commands that leave a field of `Command::limits` unset. A field left
  /// unset here as well means no limit of that kind.
  ResourceLimits default_limits = default_sandbox_limits();
  /// The identity commands run as. Default: this process's own ids, or 65534 when it
  /// runs as root. A root host may pick any non-zero ids, for example one uid per
  /// concurrent sandbox so that RLIMIT_NPROC counts each separately.
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  /// Keep the host's network namespace. Off: only a private loopback exists inside.
  bool network = false;

  /// The workspace is mounted read-only too (for trusted evaluations that only read it).
  bool read_only_workspace = false;
  /// Hidden behind empty read-only directories (or, for files, an unreadable node).
  /// Paths that do not exist on the host are skipped.
  std::vector<std::filesystem::path> hidden_paths = default_hidden_paths();
  /// Size of the private /tmp (a tmpfs, so this is memory) and of /dev/shm.
  std::uint64_t tmp_size_bytes = std::uint64_t{1} << 30;
  std::uint64_t shm_size_bytes = std::uint64_t{256} << 20;
  /// Put each command in its own cgroup v2 leaf (memory and process limits, OOM
  /// detection, killing the whole tree) when the hierarchy allows it.
  bool use_cgroups = true;
  /// The delegated cgroup v2 directory under which leaves are created; it must hold no
  /// processes itself. Created when missing and its parent is a cgroup v2 directory, so a
  /// root host on a cgroup v2 machine can name /sys/fs/cgroup/cuda-agent. Set explicitly,
  /// it must offer the memory and pids controllers, or construction fails. Empty: the
  /// cgroup this process runs in, where writable; it usually holds this process, so its
  /// leaves can track and kill but not limit (each result says so).
  std::optional<std::filesystem::path> cgroup_parent;
  /// Refuse a small set of syscalls that no build or CUDA program needs and that widen
  /// the kernel's attack surface (io_uring, bpf, userfaultfd, keyrings, ...).
  bool syscall_filter = true;
  /// bubblewrap's name (looked up in this process's PATH) or path.
  std::filesystem::path bubblewrap = "bwrap";
  std::string hostname = "sandbox";
  /// After the deadline: time between SIGTERM and SIGKILL (ProcessSandbox). Under
  /// bubblewrap SIGTERM already ends the whole sandbox.
  std::chrono::milliseconds kill_grace{1000};
};

/// The host uid and gid commands run as.
using SandboxIdentity = UserIdentity;

/// The identity `options` makes commands run as: the ids it names, else this process's
/// own ids, or 65534 when this process is root.
[[nodiscard]] inline SandboxIdentity sandbox_identity(const SandboxOptions& options) noexcept {
  const bool root = ::geteuid() == 0;
  return {options.uid.value_or(root ? default_sandbox_uid : ::geteuid()),
          options.gid.value_or(root ? default_sandbox_gid : ::getegid())};
}

/// Gives the directory tree at `path` to the sandbox identity, so that commands can write
/// there. Only needed, and only done, when this process runs as root; otherwise commands
/// run as this process's own user, who owns the tree already.
///
/// `options.protected_paths` stay with their current owner. Symbolic links are changed
/// themselves, never followed; other filesystems mounted inside are left alone, and so
/// are files with several hard links. Call it before commands run in the tree, not while
/// they do.
inline void hand_over_to_sandbox(const std::filesystem::path& path, const SandboxOptions& options) {
  if (!detail::running_as_root()) return;
  const SandboxIdentity identity = sandbox_identity(options);
  const std::filesystem::path root = detail::normal_absolute(path);
  const std::filesystem::path workspace = options.workspace.empty() ? root : detail::normal_absolute(options.workspace);
  std::vector<std::filesystem::path> skipped;
  for (const auto& protected_path : options.protected_paths)
    skipped.push_back(detail::normal_absolute(protected_path, workspace));

  try {
    detail::give_tree_to(root, identity, skipped);
  } catch (const std::system_error& error) {
    throw SandboxError("hand_over_to_sandbox: " + std::string(error.what()));
  }
}

}  // namespace cuda_agent
