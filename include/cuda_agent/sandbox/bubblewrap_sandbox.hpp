// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `BubblewrapSandbox`: runs each command under bubblewrap (bwrap, 0.8 or newer), the
/// default sandbox wherever bwrap exists and works.
///
/// What a command sees and may do:
///   - the host's filesystem read-only; the workspace read-write at its own path; the
///     protected paths inside it read-only (bound over themselves, their parent
///     directories pinned so they cannot be moved aside); extra mounts as configured;
///   - a private /tmp and /dev/shm (size-limited tmpfs), a fresh /dev with only the
///     standard nodes plus, when asked for, the NVIDIA control nodes and its own GPUs;
///     a fresh /proc showing only its own processes;
///   - /root, /home, /run and other secret-bearing paths replaced by empty read-only
///     directories;
///   - its own network (only a loopback, unless `network`), PID, IPC, UTS, cgroup and
///     user namespaces; no capabilities; no nested user namespaces; a new session (no
///     terminal injection); a seccomp filter against a few risky syscalls;
///   - the environment composed from the allowlist, the fixed variables and the command's;
///   - an unprivileged host uid: the process drops to it before bubblewrap starts, because
///     bubblewrap launched by root maps the sandbox to host uid 0 (root-only files become
///     readable, and the read-only binds can be unmounted).
///
/// Limits: the deadline ends bubblewrap, and with it the PID namespace, so every process
/// of the command dies, including those that called setsid or ignore SIGTERM. CPU time,
/// file size and open files are rlimits; memory and process count use a cgroup v2 leaf
/// when one is available (see `SandboxOptions::use_cgroups`), otherwise the best rlimits
/// offer. Each result lists how each limit was enforced (`limits`) and which were hit.
///
/// bubblewrap reports a command killed by signal N as exit status 128+N, so the results
/// of this sandbox carry that exit code; `signal` is set only when bubblewrap itself was
/// killed (at the deadline, for example). CPU times and `max_resident_kib` (the peak
/// memory charged, page cache included) come from the command's cgroup leaf; without one
/// they are 0, since the command's usage never reaches this process.

#include <cerrno>      // errno, EINTR
#include <chrono>      // seconds, milliseconds, steady_clock
#include <csignal>     // SIGKILL, kill
#include <cstring>     // strerror
#include <filesystem>  // path
#include <functional>  // ref
#include <memory>      // unique_ptr
#include <optional>    // optional
#include <stdexcept>   // invalid_argument
#include <string>      // string
#include <thread>      // thread
#include <utility>     // move
#include <vector>      // vector

#include <poll.h>         // poll, POLLIN
#include <sys/stat.h>     // stat, S_ISUID
#include <sys/syscall.h>  // SYS_pidfd_send_signal
#include <unistd.h>       // geteuid, getegid, write

#include <nlohmann/json.hpp>

#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/detail/bwrap_arguments.hpp"
#include "cuda_agent/sandbox/detail/sandbox_runtime.hpp"
#include "cuda_agent/sandbox/detail/seccomp_filter.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"

namespace cuda_agent {

namespace detail {

/// What bubblewrap's --json-status-fd said, and a pidfd of the sandbox's init process.
struct BwrapStatus {
  std::optional<pid_t> init_pid;
  /// Only present when the command was started (bubblewrap writes it after exec).
  std::optional<int> exit_code;
  UniqueFd init_pidfd;
};

/// Reads bubblewrap's status lines until end of file. On "child-pid" it opens a pidfd of
/// that process (the PID namespace's init) and only then lets the sandbox continue
/// through the block descriptor: the init is waiting for that byte, so the pid cannot
/// have been reused yet.
inline void read_bwrap_status(int json_fd, UniqueFd release, BwrapStatus& status) noexcept {
  std::string buffer;
  char chunk[4096];
  while (true) {
    const ssize_t count = ::read(json_fd, chunk, sizeof chunk);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(count));
    for (auto newline = buffer.find('\n'); newline != std::string::npos; newline = buffer.find('\n')) {
      const nlohmann::json line = nlohmann::json::parse(buffer.substr(0, newline), nullptr, false);
      buffer.erase(0, newline + 1);
      if (!line.is_object()) continue;
      if (const auto pid = line.find("child-pid"); pid != line.end() && pid->is_number_integer()) {
        status.init_pid = pid->get<pid_t>();
        status.init_pidfd = open_pidfd(*status.init_pid);
        if (release) {
          [[maybe_unused]] const auto written = ::write(release.get(), "1", 1);
          release.reset();
        }
      }
      if (const auto code = line.find("exit-code"); code != line.end() && code->is_number_integer())
        status.exit_code = code->get<int>();
    }
  }
}

/// Kills the sandbox's init, which makes the kernel kill every process of the PID
/// namespace, and waits until it has exited: the kernel lets the init exit only after all
/// other processes in the namespace are gone. Returns false if that took longer than
/// `patience`.
inline bool end_pid_namespace(const BwrapStatus& status, std::chrono::milliseconds patience) {
  if (!status.init_pidfd) return true;
#ifdef SYS_pidfd_send_signal
  ::syscall(SYS_pidfd_send_signal, status.init_pidfd.get(), SIGKILL, nullptr, 0);
#else
  if (status.init_pid) ::kill(*status.init_pid, SIGKILL);
#endif
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (true) {
    pollfd exited{status.init_pidfd.get(), POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int ready = ::poll(&exited, 1, static_cast<int>(left.count()));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return true;  // cannot watch; bubblewrap's own teardown remains
  }
}

/// "bubblewrap 0.8.0" -> {0, 8, 0}.
inline std::vector<int> parse_bwrap_version(const std::string& text) {
  std::vector<int> parts;
  const auto start = text.find_first_of("0123456789");
  if (start == std::string::npos) return parts;
  std::size_t position = start;
  while (position < text.size() && parts.size() < 3) {
    std::size_t used = 0;
    try {
      parts.push_back(std::stoi(text.substr(position), &used));
    } catch (...) {
      break;
    }
    position += used;
    if (position >= text.size() || text[position] != '.') break;
    ++position;
  }
  return parts;
}

}  // namespace detail

class BubblewrapSandbox {
 public:
  /// Checks everything that can be checked without starting a sandbox: the identity (never
  /// uid or gid 0; a process that is not root runs commands as itself), bubblewrap (found,
  /// not setuid, 0.8 or newer), the workspace, protected paths and mounts, the GPU device
  /// nodes, cgroups. Throws SandboxError saying what is wrong and what to do.
  explicit BubblewrapSandbox(SandboxOptions options)
      : options_(std::move(options)), identity_(sandbox_identity(options_)) {
    if (identity_.uid == 0 || identity_.gid == 0)
      throw SandboxError(
          "refusing to run sandboxed commands as uid or gid 0: a root-owned sandbox can read root-only "
          "files of the host and undo its own read-only mounts. Leave SandboxOptions::uid and gid "
          "unset (65534 when running as root) or choose an unprivileged id");
    if (::geteuid() != 0 && (identity_.uid != ::geteuid() || identity_.gid != ::getegid()))
      throw SandboxError("this process (uid " + std::to_string(::geteuid()) +
                         ") is not root and cannot run commands as uid " + std::to_string(identity_.uid) + " gid " +
                         std::to_string(identity_.gid) + "; leave SandboxOptions::uid and gid unset");
    bubblewrap_ = locate_bubblewrap(options_.bubblewrap);
    layout_ = detail::make_bwrap_layout(options_, identity_);
    if (options_.syscall_filter) seccomp_program_ = detail::seccomp_filter_bytes();
    cgroups_ = detail::CgroupSupport::discover(options_);
  }

  /// Runs one command confined. Safe to call from several threads at once. Throws
  /// SandboxError only when the sandbox cannot be set up (bubblewrap refuses, a protected
  /// path was tampered with, processes refuse to die).
  [[nodiscard]] CommandResult run(const Command& command) {
    if (command.argv.empty() || command.argv.front().empty())
      throw std::invalid_argument("BubblewrapSandbox::run: the command has no program");
    detail::check_layout_before_run(layout_);

    const ResourceLimits limits = detail::merge_limits(command.limits, options_.default_limits);
    const detail::CommandCgroup cgroup =
        detail::make_command_cgroup(cgroups_, limits, options_.cgroup_parent.has_value());
    detail::CgroupLeaf* leaf = cgroup.leaf.get();
    detail::LimitContext context = detail::make_limit_context(cgroup, options_, identity_, command);
    context.wall_time_mechanism = "timer, PID namespace";
    context.wall_time_note =
        "at the deadline bubblewrap is terminated, and the kernel kills every process of the "
        "sandbox's PID namespace, also those that called setsid or ignore SIGTERM";
    context.disk_note = "/tmp (" + detail::byte_count(options_.tmp_size_bytes) + ") and /dev/shm (" +
                        detail::byte_count(options_.shm_size_bytes) +
                        ") are private tmpfs; everything else but the workspace is read-only. The workspace's "
                        "total size is bounded only by the filesystem it lives on.";
    const detail::LimitPlan plan = detail::plan_limits(limits, context);

    detail::Pipe status_pipe = detail::make_pipe();
    detail::Pipe release_pipe = detail::make_pipe();
    detail::Pipe seccomp_pipe;
    detail::BwrapDescriptors descriptors{status_pipe.write.get(), release_pipe.read.get(), -1};
    if (!seccomp_program_.empty()) {
      seccomp_pipe = detail::make_pipe();
      // A few hundred bytes: fits the pipe buffer, so writing cannot block.
      if (::write(seccomp_pipe.write.get(), seccomp_program_.data(), seccomp_program_.size()) !=
          static_cast<ssize_t>(seccomp_program_.size()))
        throw SandboxError("cannot pass the seccomp filter to bubblewrap: " + std::string(std::strerror(errno)));
      seccomp_pipe.write.reset();
      descriptors.seccomp = seccomp_pipe.read.get();
    }

    // The environment reaches the command through bubblewrap's own, which is exactly the
    // composed one: nothing else of the host's is inherited, and values stay out of the
    // command line (visible to every user of the host), unlike --clearenv/--setenv.
    ProcessSpec spec = detail::sandbox_process_spec(command, options_, identity_, plan, leaf);
    spec.argv.push_back(bubblewrap_.string());
    const std::filesystem::path working_directory = detail::working_directory_of(command, layout_.workspace);
    for (std::string& argument : detail::bwrap_arguments(layout_, descriptors, working_directory, command.argv))
      spec.argv.push_back(std::move(argument));
    spec.working_directory = "/";  // bubblewrap's own; the command's is --chdir
    spec.child.inherited_fds = {status_pipe.write.get(), release_pipe.read.get()};
    if (descriptors.seccomp >= 0) spec.child.inherited_fds.push_back(descriptors.seccomp);

    detail::BwrapStatus status;
    ProcessResult finished;
    {
      std::thread status_reader(detail::read_bwrap_status, status_pipe.read.get(), std::move(release_pipe.write),
                                std::ref(status));
      // The reader sees end of file once every writer is gone: bubblewrap (exited) and
      // this process's copy, closed here however run_process ends.
      struct JoinReader {
        std::thread& reader;
        detail::UniqueFd& writer;
        ~JoinReader() {
          writer.reset();
          reader.join();
        }
      } join_reader{status_reader, status_pipe.write};
      try {
        finished = run_process(spec);
      } catch (const ProcessError& error) {
        throw SandboxError(std::string("cannot start bubblewrap: ") + error.what());
      }
    }

    if (!detail::end_pid_namespace(status, std::chrono::seconds(60)))
      throw SandboxError("the sandbox's processes were still exiting 60 s after SIGKILL (pid " +
                         std::to_string(status.init_pid.value_or(0)) +
                         " and its namespace); the host may be unhealthy (a GPU that does not release its "
                         "contexts? see dmesg)");
    detail::CgroupLeaf::Events events;
    if (leaf) {
      events = leaf->events();
      if (!leaf->kill_all(std::chrono::seconds(10)))
        throw SandboxError("processes were still alive 10 s after cgroup.kill of " + leaf->directory().string());
    }

    CommandResult result;
    static_cast<ProcessResult&>(result) = std::move(finished);
    // bubblewrap's init reaps the command and is never waited for by bubblewrap itself,
    // so the usage run_process collected is bubblewrap's own: take the command's from its
    // cgroup, or say nothing.
    const detail::CgroupLeaf::Usage usage = leaf ? leaf->usage() : detail::CgroupLeaf::Usage{};
    result.user_cpu_time = usage.user;
    result.system_cpu_time = usage.system;
    result.max_resident_kib = usage.peak_memory_kib;
    result.confined = true;
    result.sandbox = "bubblewrap";
    result.limits = plan.statuses;

    const bool started = status.exit_code.has_value();
    if (!started && !result.timed_out && !result.cancelled && !result.signal) {
      // The command never ran, so every byte of output is bubblewrap's own.
      const std::string output = result.standard_error.text + result.standard_output.text;
      if (const auto exec = output.find("bwrap: execvp "); exec != std::string::npos) {
        CapturedOutput& stream = command.merge_stderr ? result.standard_output : result.standard_error;
        stream.text = "cannot execute " + output.substr(exec + 14);
        stream.total_bytes = stream.text.size();
        result.exit_code = output.find("No such file", exec) != std::string::npos ? 127 : 126;
        return result;
      }
      throw SandboxError(detail::explain_bwrap_failure(output, identity_));
    }

    std::optional<int> signal = result.signal;
    if (!signal && started && *status.exit_code > 128 && *status.exit_code < 128 + 65) signal = *status.exit_code - 128;
    result.limits_hit = detail::detect_limit_hits(result, signal, limits, events);
    return result;
  }

  /// Starts a trivial command inside and throws SandboxError, with the reason, when that
  /// fails: user namespaces disabled, /proc masked by a container, and the like.
  void check() {
    Command probe;
    probe.argv = {"/bin/sh", "-c", "exit 0"};
    probe.timeout = std::chrono::seconds(30);
    const CommandResult result = run(probe);
    if (!result.succeeded())
      throw SandboxError("a trivial command failed inside the sandbox (" + describe_exit(result) +
                         "): " + result.standard_output.text);
  }

  [[nodiscard]] const SandboxOptions& options() const noexcept { return options_; }
  [[nodiscard]] SandboxIdentity identity() const noexcept { return identity_; }
  [[nodiscard]] const std::filesystem::path& bubblewrap() const noexcept { return bubblewrap_; }

  /// The cgroup v2 directory in which each command gets its own leaf, if any.
  [[nodiscard]] std::optional<std::filesystem::path> cgroup_parent() const {
    if (!cgroups_.parent) return std::nullopt;
    return cgroups_.parent->directory;
  }

  /// How memory and process limits are enforced for this sandbox's commands: empty when
  /// through cgroup v2, otherwise why not.
  [[nodiscard]] std::string cgroup_limitations() const {
    if (!cgroups_.parent) return cgroups_.unavailable_reason;
    return cgroups_.parent->note();
  }

 private:
  static std::filesystem::path locate_bubblewrap(const std::filesystem::path& name) {
    const auto found = find_program(name.string(), Environment::from_current({"PATH"}));
    if (!found || !std::filesystem::exists(*found))
      throw SandboxError("bubblewrap ('" + name.string() +
                         "') was not found in PATH. Install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: "
                         "dnf install bubblewrap) or set SandboxOptions::bubblewrap to its path. To run commands "
                         "without any confinement instead, construct ProcessSandbox explicitly");
    std::filesystem::path path = detail::normal_absolute(*found);
    struct stat status {};
    if (::stat(path.c_str(), &status) == 0 && (status.st_mode & S_ISUID) != 0)
      throw SandboxError(path.string() +
                         " is installed setuid root; that mode is deprecated upstream, has had "
                         "privilege-escalation bugs, and behaves differently. Install a bubblewrap that is not "
                         "setuid (distributions have shipped it so since 2021) with unprivileged user namespaces "
                         "enabled");
    ProcessSpec version_query;
    version_query.argv = {path.string(), "--version"};
    version_query.timeout = std::chrono::seconds(10);
    version_query.merge_stderr = true;
    std::string text;
    try {
      text = run_process(version_query).standard_output.text;
    } catch (const ProcessError& error) {
      throw SandboxError("cannot run " + path.string() + ": " + error.what());
    }
    const std::vector<int> parts = detail::parse_bwrap_version(text);
    if (parts.size() < 2 || (parts[0] == 0 && parts[1] < 8))
      throw SandboxError(path.string() + " reports '" + text.substr(0, text.find('\n')) +
                         "'; bubblewrap 0.8.0 or newer is required (--disable-userns, --size)");
    return path;
  }

  SandboxOptions options_;
  SandboxIdentity identity_;
  std::filesystem::path bubblewrap_;
  detail::BwrapLayout layout_;
  std::string seccomp_program_;
  detail::CgroupSupport cgroups_;
};

static_assert(Sandbox<BubblewrapSandbox>);

/// The default sandbox: bubblewrap, after checking that it starts a command on this host.
/// Throws SandboxError explaining what is missing. It never falls back to running
/// commands unconfined; a host that accepts that for trusted commands constructs
/// ProcessSandbox itself.
[[nodiscard]] inline AnySandbox make_default_sandbox(SandboxOptions options) {
  try {
    BubblewrapSandbox sandbox(std::move(options));
    sandbox.check();
    return AnySandbox(std::move(sandbox));
  } catch (const SandboxError& error) {
    throw SandboxError(std::string("no sandbox available: ") + error.what() +
                       ". cuda-agent does not fall back to running commands unconfined; a host that accepts that "
                       "for trusted commands constructs ProcessSandbox explicitly");
  }
}

}  // namespace cuda_agent
