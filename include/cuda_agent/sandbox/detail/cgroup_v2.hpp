// SPDX-License-Identifier: Apache-2.0
#pragma once

// cgroup v2 leaves for sandboxed commands: one per command, with memory.max,
// memory.swap.max=0 and pids.max where those controllers are available, OOM and
// process-limit detection from the event counters, and cgroup.kill to end the whole tree.
// Without the controllers a leaf still tracks and kills every descendant, including
// those that left the process group with setsid.

#include <cerrno>       // errno, EBUSY, ENOENT
#include <chrono>       // steady_clock, milliseconds
#include <csignal>      // kill, SIGKILL
#include <cstdint>      // uint64_t, int64_t
#include <cstring>      // strerror
#include <filesystem>   // path
#include <fstream>      // ifstream
#include <istream>      // istream
#include <optional>     // optional
#include <sstream>      // istringstream
#include <string>       // string, getline
#include <string_view>  // string_view
#include <thread>       // sleep_for
#include <utility>      // move, exchange
#include <vector>       // vector

#include <fcntl.h>       // open, O_WRONLY, O_CLOEXEC
#include <sys/stat.h>    // mkdir
#include <sys/statfs.h>  // statfs
#include <unistd.h>      // access, write, rmdir, getpid

#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/sandbox_paths.hpp"

namespace cuda_agent::detail {

inline constexpr long cgroup2_filesystem_magic = 0x63677270;  // CGROUP2_SUPER_MAGIC

/// Undoes the octal escapes (\040 for a space, ...) of /proc/self/mountinfo fields.
inline std::string unescape_mount_field(std::string_view field) {
  std::string result;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits(field.substr(i + 1, 3));
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        result += static_cast<char>(std::stoi(digits, nullptr, 8));
        i += 3;
        continue;
      }
    }
    result += field[i];
  }
  return result;
}

/// The mount point of the cgroup v2 hierarchy in a /proc/self/mountinfo listing.
inline std::optional<std::filesystem::path> find_cgroup2_mount(std::istream& mountinfo) {
  std::string line;
  while (std::getline(mountinfo, line)) {
    const auto separator = line.find(" - ");
    if (separator == std::string::npos) continue;
    std::istringstream after(line.substr(separator + 3));
    std::string filesystem_type;
    after >> filesystem_type;
    if (filesystem_type != "cgroup2") continue;
    std::istringstream before(line.substr(0, separator));
    std::string id, parent, device, root, mount_point;
    if (before >> id >> parent >> device >> root >> mount_point) return unescape_mount_field(mount_point);
  }
  return std::nullopt;
}

/// This process's cgroup v2 path (the "0::" line of /proc/self/cgroup), e.g. "/" or
/// "/system.slice/x.service".
inline std::optional<std::string> find_own_cgroup2(std::istream& proc_cgroup) {
  std::string line;
  while (std::getline(proc_cgroup, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return std::nullopt;
}

/// The value of `key` in a flat-keyed cgroup file ("oom_kill 3" in memory.events).
inline std::uint64_t read_cgroup_counter(const std::filesystem::path& file, std::string_view key) {
  std::ifstream input(file);
  std::string name;
  std::uint64_t value = 0;
  while (input >> name >> value)
    if (name == key) return value;
  return 0;
}

inline std::string read_cgroup_line(const std::filesystem::path& file) {
  std::ifstream input(file);
  std::string line;
  std::getline(input, line);
  return line;
}

/// Writes `value` to a cgroup control file; errno is kept for the caller on failure.
inline bool write_cgroup_file(const std::filesystem::path& file, std::string_view value) {
  const UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return false;
  return ::write(fd.get(), value.data(), value.size()) == static_cast<ssize_t>(value.size());
}

inline bool has_word(const std::string& words, std::string_view word) {
  std::istringstream input(words);
  std::string each;
  while (input >> each)
    if (each == word) return true;
  return false;
}

/// Where leaves are created and which controllers they get.
struct CgroupParent {
  std::filesystem::path directory;
  bool memory = false;
  bool pids = false;
  /// Why a controller is missing; empty when it is there.
  std::string memory_note;
  std::string pids_note;

  [[nodiscard]] std::string note() const {
    return memory_note + (memory_note.empty() || pids_note.empty() ? "" : "; ") + pids_note;
  }
};

/// The outcome of looking for a usable cgroup v2 parent.
struct CgroupDiscovery {
  std::optional<CgroupParent> parent;
  /// Why there is none.
  std::string reason;
};

/// Enables the memory and pids controllers for the children of `directory` where it can,
/// and says what it could not.
inline CgroupParent prepare_cgroup_parent(const std::filesystem::path& directory) {
  CgroupParent parent;
  parent.directory = directory;
  const std::string available = read_cgroup_line(directory / "cgroup.controllers");
  for (const std::string controller : {"memory", "pids"}) {
    bool enabled = has_word(read_cgroup_line(directory / "cgroup.subtree_control"), controller);
    std::string note;
    if (!enabled && has_word(available, controller)) {
      enabled = write_cgroup_file(directory / "cgroup.subtree_control", "+" + controller);
      if (!enabled) {
        const int error = errno;
        note = "cannot enable the " + controller + " controller in " + directory.string() + ": " +
               std::strerror(error) +
               (error == EBUSY ? " (the cgroup holds processes, this one among them, and cgroup v2 allows "
                                 "controllers only for the children of a cgroup without processes: start the host "
                                 "in a delegated cgroup and pass an empty child of it as SandboxOptions::cgroup_parent)"
                               : "");
      }
    } else if (!enabled) {
      note = "the cgroup v2 hierarchy does not offer the " + controller + " controller to " + directory.string() +
             " (on a host with cgroup v1 or a hybrid layout it belongs to the v1 hierarchy)";
    }
    if (controller == "memory") {
      parent.memory = enabled;
      parent.memory_note = std::move(note);
    } else {
      parent.pids = enabled;
      parent.pids_note = std::move(note);
    }
  }
  return parent;
}

/// Finds the cgroup v2 directory to create leaves in: `configured` when given (it must
/// be a writable cgroup v2 directory, else this throws), otherwise this process's own
/// cgroup when it is writable.
inline CgroupDiscovery discover_cgroup_parent(const std::optional<std::filesystem::path>& configured) {
  if (configured) {
    const std::filesystem::path directory = normal_absolute(*configured);
    struct statfs filesystem {};
    // Created on first use when its parent is a cgroup v2 directory (a root host can
    // simply name /sys/fs/cgroup/cuda-agent).
    if (::statfs(directory.parent_path().c_str(), &filesystem) == 0 && filesystem.f_type == cgroup2_filesystem_magic &&
        ::mkdir(directory.c_str(), 0755) != 0 && errno != EEXIST)
      throw SandboxError("cannot create SandboxOptions::cgroup_parent " + directory.string() + ": " +
                         std::strerror(errno));
    if (::statfs(directory.c_str(), &filesystem) != 0 || filesystem.f_type != cgroup2_filesystem_magic)
      throw SandboxError("SandboxOptions::cgroup_parent " + directory.string() +
                         " is not a directory of a cgroup v2 hierarchy");
    if (::access(directory.c_str(), W_OK) != 0)
      throw SandboxError("SandboxOptions::cgroup_parent " + directory.string() +
                         " is not writable by this process: delegate it (chown, or systemd's Delegate=yes)");
    CgroupParent parent = prepare_cgroup_parent(directory);
    if (!parent.memory || !parent.pids)
      throw SandboxError("SandboxOptions::cgroup_parent " + directory.string() +
                         " cannot limit commands: " + parent.note());
    return {std::move(parent), {}};
  }

  std::ifstream mountinfo("/proc/self/mountinfo");
  const auto mount_point = find_cgroup2_mount(mountinfo);
  if (!mount_point) return {std::nullopt, "no cgroup v2 hierarchy is mounted"};
  std::ifstream proc_cgroup("/proc/self/cgroup");
  const auto own = find_own_cgroup2(proc_cgroup);
  if (!own) return {std::nullopt, "this process is in no cgroup v2 (no \"0::\" line in /proc/self/cgroup)"};
  const std::filesystem::path directory = normal_absolute(std::filesystem::path(*own).relative_path(), *mount_point);
  if (::access(directory.c_str(), W_OK) != 0)
    return {std::nullopt, "this process's cgroup " + directory.string() +
                              " is not writable by it (not delegated): run as root, or in a cgroup delegated to "
                              "this user, and set SandboxOptions::cgroup_parent"};
  return {prepare_cgroup_parent(directory), {}};
}

/// One command's cgroup: created before it starts, emptied and removed after it ends.
class CgroupLeaf {
 public:
  /// Creates `parent/name` with the given limits. Throws SandboxError when the leaf
  /// cannot be created or a limit cannot be written.
  CgroupLeaf(const CgroupParent& parent, const std::string& name, std::optional<std::uint64_t> memory_bytes,
             std::optional<std::uint64_t> processes)
      : directory_(parent.directory / name) {
    if (::mkdir(directory_.c_str(), 0755) != 0)
      throw SandboxError("cannot create the cgroup " + directory_.string() + ": " + std::strerror(errno));
    created_ = true;
    try {
      if (parent.memory && memory_bytes) {
        set("memory.max", std::to_string(*memory_bytes));
        // Without swap the limit is a limit; the file is absent where swap accounting is
        // compiled out, and then there is no swap to account either.
        if (std::filesystem::exists(directory_ / "memory.swap.max")) set("memory.swap.max", "0");
        // One OOM kill ends the whole command rather than a random process of it.
        set("memory.oom.group", "1");
        memory_limited_ = true;
      }
      if (parent.pids && processes) {
        set("pids.max", std::to_string(*processes));
        pids_limited_ = true;
      }
      procs_.reset(::open((directory_ / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!procs_)
        throw SandboxError("cannot open " + (directory_ / "cgroup.procs").string() + ": " + std::strerror(errno));
    } catch (...) {
      remove();
      throw;
    }
  }

  CgroupLeaf(const CgroupLeaf&) = delete;
  CgroupLeaf& operator=(const CgroupLeaf&) = delete;
  ~CgroupLeaf() { remove(); }

  /// The open cgroup.procs file the child writes itself into before exec.
  [[nodiscard]] int procs_fd() const noexcept { return procs_.get(); }
  [[nodiscard]] bool memory_limited() const noexcept { return memory_limited_; }
  [[nodiscard]] bool pids_limited() const noexcept { return pids_limited_; }
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }

  struct Events {
    std::uint64_t oom_kills = 0;
    std::uint64_t pids_limit_hits = 0;
  };

  /// The limit events so far.
  [[nodiscard]] Events events() const {
    Events events;
    if (memory_limited_) events.oom_kills = read_cgroup_counter(directory_ / "memory.events", "oom_kill");
    if (pids_limited_) events.pids_limit_hits = read_cgroup_counter(directory_ / "pids.events", "max");
    return events;
  }

  /// CPU time of every process that ran in the leaf (cpu.stat exists in every cgroup v2
  /// directory, controllers or not), and the peak memory charged to it where the memory
  /// controller reports one (memory.peak, Linux 5.19).
  struct Usage {
    std::chrono::microseconds user{0};
    std::chrono::microseconds system{0};
    std::int64_t peak_memory_kib = 0;
  };
  [[nodiscard]] Usage usage() const {
    Usage usage;
    usage.user = std::chrono::microseconds(read_cgroup_counter(directory_ / "cpu.stat", "user_usec"));
    usage.system = std::chrono::microseconds(read_cgroup_counter(directory_ / "cpu.stat", "system_usec"));
    std::ifstream peak(directory_ / "memory.peak");
    std::uint64_t bytes = 0;
    if (peak >> bytes) usage.peak_memory_kib = static_cast<std::int64_t>(bytes / 1024);
    return usage;
  }

  /// Whether any process is still in the leaf.
  [[nodiscard]] bool populated() const { return read_cgroup_counter(directory_ / "cgroup.events", "populated") != 0; }

  /// Kills every process in the leaf and waits until they are gone (at most `patience`).
  /// Returns false when some are still there afterwards.
  bool kill_all(std::chrono::milliseconds patience) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    // cgroup.kill (Linux 5.14) kills atomically, also processes forking at that moment.
    const bool atomic_kill = write_cgroup_file(directory_ / "cgroup.kill", "1");
    while (populated()) {
      if (!atomic_kill) {
        std::ifstream procs(directory_ / "cgroup.procs");
        pid_t pid;
        while (procs >> pid) ::kill(pid, SIGKILL);
      }
      if (std::chrono::steady_clock::now() >= give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

 private:
  void set(const char* file, const std::string& value) {
    if (!write_cgroup_file(directory_ / file, value))
      throw SandboxError("cannot write " + value + " to " + (directory_ / file).string() + ": " + std::strerror(errno));
  }

  void remove() noexcept {
    if (!created_) return;
    procs_.reset();
    kill_all(std::chrono::seconds(10));
    // The kernel frees the leaf a moment after its last process is reaped.
    for (int attempt = 0; attempt < 500; ++attempt) {
      if (::rmdir(directory_.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    created_ = false;
  }

  std::filesystem::path directory_;
  UniqueFd procs_;
  bool created_ = false;
  bool memory_limited_ = false;
  bool pids_limited_ = false;
};

}  // namespace cuda_agent::detail
