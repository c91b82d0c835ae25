// SPDX-License-Identifier: Apache-2.0
#pragma once

// The bubblewrap command line of a sandbox, in the order the mounts must stack:
//
//   namespaces, lifetime, privileges         --unshare-all [--share-net] --unshare-user --disable-userns
//                                            --die-with-parent --new-session --cap-drop ALL --hostname
//   status and synchronisation descriptors   --json-status-fd --block-fd [--add-seccomp-fd]
//   read-only host                           --ro-bind / /
//   fresh /dev, sized /dev/shm, GPU nodes    --dev /dev --size --tmpfs /dev/shm --dev-bind ... --remount-ro /dev
//   fresh /proc, private sized /tmp          --proc /proc --size --tmpfs /tmp
//   secrets hidden                           --tmpfs <dir> | --ro-bind /dev/null <file>
//   workspace                                --bind W W
//   parents of protected paths (anchors)     --bind D D        (a mount point cannot be renamed)
//   protected paths                          --ro-bind P P
//   extra mounts, trusted copies             --ro-bind|--bind|--dev-bind[-try] S D
//   hidden directories made read-only        --remount-ro <dir>
//   working directory, command               --chdir C -- argv...
//
// Later mounts stack on earlier ones, so each protection comes after what it narrows.

#include <algorithm>   // sort, unique, find
#include <cstdint>     // uint64_t
#include <filesystem>  // path
#include <optional>    // optional
#include <string>      // string, to_string
#include <utility>     // move
#include <vector>      // vector

#include <sys/stat.h>  // lstat, S_IS*

#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/nvidia_devices.hpp"
#include "cuda_agent/sandbox/detail/sandbox_paths.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"

namespace cuda_agent::detail {

/// The validated, normalised mount plan of one sandbox.
struct BwrapLayout {
  std::filesystem::path workspace;
  bool read_only_workspace = false;
  std::vector<std::filesystem::path> protected_paths;
  /// Directories strictly between the workspace and a protected path or an in-workspace
  /// mount destination, shallowest first.
  std::vector<std::filesystem::path> anchors;
  std::vector<Mount> mounts;
  std::vector<std::filesystem::path> hidden_directories;
  std::vector<std::filesystem::path> hidden_files;
  NvidiaDeviceNodes gpu_nodes;
  std::uint64_t tmp_size_bytes = 0;
  std::uint64_t shm_size_bytes = 0;
  bool network = false;
  std::string hostname;
};

/// Descriptors the command line refers to; -1 leaves the option out.
struct BwrapDescriptors {
  int json_status = -1;
  int block = -1;
  int seccomp = -1;
};

inline void add_anchors(std::vector<std::filesystem::path>& anchors, const std::filesystem::path& workspace,
                        const std::filesystem::path& target) {
  std::filesystem::path current = workspace;
  const std::filesystem::path relative = target.lexically_relative(workspace);
  for (auto component = relative.begin(); component != relative.end(); ++component) {
    if (std::next(component) == relative.end()) break;  // the target itself
    current /= *component;
    anchors.push_back(current);
  }
}

/// Validates `options` for an identity and plans the mounts. Throws SandboxError with
/// what is wrong and what to do.
inline BwrapLayout make_bwrap_layout(const SandboxOptions& options, const SandboxIdentity& identity) {
  BwrapLayout layout;
  if (options.workspace.empty()) throw SandboxError("SandboxOptions::workspace is empty");
  const std::filesystem::path given = normal_absolute(options.workspace);
  if (!std::filesystem::is_directory(given))
    throw SandboxError("the workspace " + given.string() + " is not a directory");
  // Without links in its path: bubblewrap resolves mount destinations against the host's
  // root, so a link such as /var/run -> /run would carry every mount into the workspace
  // outside the sandbox's view. Paths given under the original spelling are moved along.
  layout.workspace = std::filesystem::canonical(given);
  if (layout.workspace == "/") throw SandboxError("the workspace cannot be the root directory");
  const auto in_workspace = [&](const std::filesystem::path& path) {
    const std::filesystem::path absolute = normal_absolute(path, layout.workspace);
    return is_within(absolute, given) ? normal_absolute(absolute.lexically_relative(given), layout.workspace)
                                      : absolute;
  };
  if (const auto reason = unreachable_reason(layout.workspace, identity.uid, identity.gid))
    throw SandboxError("the sandbox user cannot reach the workspace: " + *reason + "; put workspaces where uid " +
                       std::to_string(identity.uid) + " can enter (for example under /tmp or /var/lib/<app>)");
  layout.read_only_workspace = options.read_only_workspace;

  for (const auto& path : options.protected_paths) {
    const std::filesystem::path absolute = in_workspace(path);
    if (absolute == layout.workspace || !is_within(absolute, layout.workspace))
      throw SandboxError("the protected path " + absolute.string() + " is not inside the workspace " +
                         layout.workspace.string() + " (use SandboxOptions::mounts for paths elsewhere)");
    layout.protected_paths.push_back(absolute);
    add_anchors(layout.anchors, layout.workspace, absolute);
  }

  for (const auto& path : options.hidden_paths) {
    const std::filesystem::path absolute = normal_absolute(path);
    if (absolute == "/" || absolute == layout.workspace || absolute == "/tmp" || absolute == "/dev" ||
        absolute == "/proc")
      throw SandboxError("cannot hide " + absolute.string() +
                         ": the root, the workspace, /tmp, /dev and /proc are set up by the sandbox itself");
    struct stat status {};
    if (::lstat(absolute.c_str(), &status) != 0) continue;
    // A link (such as /var/run -> /run) is hidden through its target, if that is listed.
    if (S_ISLNK(status.st_mode)) continue;
    (S_ISDIR(status.st_mode) ? layout.hidden_directories : layout.hidden_files).push_back(absolute);
  }

  for (const Mount& mount : options.mounts) {
    if (!mount.destination.is_absolute())
      throw SandboxError("the mount destination " + mount.destination.string() + " is not an absolute path");
    Mount normal = mount;
    normal.source = normal_absolute(mount.source);
    normal.destination = in_workspace(mount.destination);
    if (normal.destination == "/") throw SandboxError("a mount cannot replace the root directory");
    if (!std::filesystem::exists(normal.source)) {
      if (mount.optional) continue;
      throw SandboxError("the mount source " + normal.source.string() + " does not exist");
    }
    if (const auto reason = unreachable_reason(normal.source, identity.uid, identity.gid)) {
      if (mount.optional) continue;
      throw SandboxError("the sandbox user cannot reach the mount source: " + *reason);
    }
    if (is_within(normal.destination, layout.workspace) && normal.destination != layout.workspace) {
      if (!std::filesystem::is_directory(normal.destination.parent_path()))
        throw SandboxError("the parent of the mount destination " + normal.destination.string() +
                           " does not exist; create it in the workspace before constructing the sandbox");
      add_anchors(layout.anchors, layout.workspace, normal.destination);
    } else if (!std::filesystem::exists(normal.destination)) {
      // bubblewrap can create mount points only on its own tmpfs: /tmp and hidden paths.
      bool on_tmpfs = is_within(normal.destination, "/tmp");
      for (const auto& hidden : layout.hidden_directories) on_tmpfs = on_tmpfs || is_within(normal.destination, hidden);
      if (!on_tmpfs)
        throw SandboxError("the mount destination " + normal.destination.string() +
                           " does not exist on the host, and the sandbox's root is read-only: use an existing "
                           "path, or one under /tmp or under the workspace");
    }
    layout.mounts.push_back(std::move(normal));
  }
  std::sort(layout.anchors.begin(), layout.anchors.end(), [](const auto& left, const auto& right) {
    const auto depth = [](const std::filesystem::path& path) { return std::distance(path.begin(), path.end()); };
    return depth(left) != depth(right) ? depth(left) < depth(right) : left < right;
  });
  layout.anchors.erase(std::unique(layout.anchors.begin(), layout.anchors.end()), layout.anchors.end());

  layout.gpu_nodes = nvidia_device_nodes(options.gpus);
  layout.tmp_size_bytes = options.tmp_size_bytes;
  layout.shm_size_bytes = options.shm_size_bytes;
  layout.network = options.network;
  layout.hostname = options.hostname;
  return layout;
}

/// Re-checks, right before a command starts, what an earlier command could have changed:
/// protected paths must exist, and nothing between the workspace and a read-only mount
/// may be a symbolic link.
inline void check_layout_before_run(const BwrapLayout& layout) {
  for (const auto& path : layout.protected_paths) {
    require_no_links_below(layout.workspace, path, "the protected path");
    struct stat status {};
    if (::lstat(path.c_str(), &status) != 0)
      throw SandboxError("the protected path " + path.string() + " does not exist");
  }
  for (const Mount& mount : layout.mounts)
    if (is_within(mount.destination, layout.workspace))
      require_no_links_below(layout.workspace, mount.destination, "the mount destination");
}

/// The full bubblewrap argument vector (without the program itself).
inline std::vector<std::string> bwrap_arguments(const BwrapLayout& layout, const BwrapDescriptors& descriptors,
                                                const std::filesystem::path& working_directory,
                                                const std::vector<std::string>& argv) {
  std::vector<std::string> args;
  auto add = [&](std::initializer_list<std::string> values) { args.insert(args.end(), values); };

  // --unshare-all: user (where possible), ipc, pid, net, uts and cgroup namespaces.
  // --unshare-user is required by --disable-userns, which makes nested user namespaces
  // (a way back to mount privileges) fail inside. --die-with-parent is only a kill switch
  // for the whole tree together with the PID namespace: when bubblewrap's init dies, the
  // kernel kills every process in it, including those that called setsid.
  add({"--unshare-all"});
  if (layout.network) add({"--share-net"});
  add({"--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL"});
  add({"--hostname", layout.hostname});
  if (descriptors.json_status >= 0) add({"--json-status-fd", std::to_string(descriptors.json_status)});
  if (descriptors.block >= 0) add({"--block-fd", std::to_string(descriptors.block)});
  if (descriptors.seccomp >= 0) add({"--add-seccomp-fd", std::to_string(descriptors.seccomp)});

  add({"--ro-bind", "/", "/"});
  // A fresh /dev holds only null, zero, full, random, urandom, tty and a private devpts;
  // /dev itself is a writable tmpfs, so it is made read-only once the nodes are in.
  add({"--dev", "/dev", "--size", std::to_string(layout.shm_size_bytes), "--tmpfs", "/dev/shm"});
  // Device nodes need --dev-bind: a plain bind is mounted nodev and CUDA then sees no
  // device (error 100).
  for (const auto& node : layout.gpu_nodes.required) add({"--dev-bind", node.string(), node.string()});
  for (const auto& node : layout.gpu_nodes.optional) add({"--dev-bind-try", node.string(), node.string()});
  add({"--remount-ro", "/dev"});
  add({"--proc", "/proc"});
  add({"--size", std::to_string(layout.tmp_size_bytes), "--tmpfs", "/tmp"});

  for (const auto& directory : layout.hidden_directories) add({"--tmpfs", directory.string()});
  // Binding a device node over a file hides it: the bind is nodev, so opening it fails.
  for (const auto& file : layout.hidden_files) add({"--ro-bind", "/dev/null", file.string()});
  if (!layout.gpu_nodes.required.empty())
    // The persistence daemon's socket, as the NVIDIA container toolkit provides it.
    add({"--ro-bind-try", "/run/nvidia-persistenced/socket", "/run/nvidia-persistenced/socket"});

  const std::string workspace = layout.workspace.string();
  add({layout.read_only_workspace ? "--ro-bind" : "--bind", workspace, workspace});
  if (!layout.read_only_workspace)
    for (const auto& anchor : layout.anchors) add({"--bind", anchor.string(), anchor.string()});
  for (const auto& path : layout.protected_paths) add({"--ro-bind", path.string(), path.string()});
  for (const Mount& mount : layout.mounts) {
    std::string option = mount.access == Mount::Access::read_only    ? "--ro-bind"
                         : mount.access == Mount::Access::read_write ? "--bind"
                                                                     : "--dev-bind";
    if (mount.optional) option += "-try";
    add({option, mount.source.string(), mount.destination.string()});
  }
  // Empty, but writable by the sandbox user and so a way to fill memory, until now.
  for (const auto& directory : layout.hidden_directories) add({"--remount-ro", directory.string()});

  add({"--chdir", working_directory.string(), "--"});
  args.insert(args.end(), argv.begin(), argv.end());
  return args;
}

/// Turns bubblewrap's own error output into a message that says what is wrong with the
/// host and what to do. Only called when the command never started, so all of the
/// output is bubblewrap's.
inline std::string explain_bwrap_failure(const std::string& output, const SandboxIdentity& identity) {
  std::string line = output;
  if (const auto start = line.find("bwrap: "); start != std::string::npos) line = line.substr(start);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.empty()) line = "(no message)";
  const auto mentions = [&](const char* text) { return output.find(text) != std::string::npos; };

  if (mentions("No permissions to creat") || mentions("Creating new namespace failed") ||
      mentions("setting up uid map") || mentions("uid_map") || mentions("unshare failed"))
    return "bubblewrap could not create a user namespace: " + line +
           " (unprivileged user namespaces are disabled or restricted on this host: check "
           "kernel.unprivileged_userns_clone=1 (Debian), user.max_user_namespaces > 0, "
           "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap (Ubuntu 23.10 and "
           "newer), and, inside a container, a seccomp profile that allows unshare)";
  if (mentions("Can't mount proc"))
    return "bubblewrap could not mount /proc: " + line +
           " (inside a container that masks /proc: run it with --security-opt systempaths=unconfined (Docker) or "
           "--security-opt unmask=ALL (Podman))";
  if (mentions("Resource temporarily unavailable"))
    return "bubblewrap could not start a process: " + line + " (uid " + std::to_string(identity.uid) +
           " has reached its process limit; RLIMIT_NPROC counts every process of that uid on the host, those of "
           "other sandboxes included, so raise Command::limits.processes or give sandboxes their own uids)";
  if (mentions("Can't find source path") || mentions("Can't chdir"))
    return "bubblewrap could not set up the sandbox's files: " + line + " (uid " + std::to_string(identity.uid) +
           " must be able to reach every bound path and the working directory)";
  return "bubblewrap could not set up the sandbox: " + line;
}

}  // namespace cuda_agent::detail
