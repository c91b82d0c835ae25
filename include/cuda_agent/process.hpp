// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Runs one child process safely: argv vectors only, an explicit environment, its own
/// process group, stdout and stderr drained together with poll(), a wall-clock deadline
/// that escalates from SIGTERM to SIGKILL on the whole group, and output capture bounded
/// in memory. The sandbox, the compile driver and the Python harness all launch through it.

#include <chrono>            // milliseconds, nanoseconds, microseconds
#include <cstddef>           // size_t
#include <cstdint>           // uint64_t, int64_t
#include <filesystem>        // path
#include <initializer_list>  // initializer_list
#include <map>               // map
#include <optional>          // optional
#include <stdexcept>         // runtime_error
#include <stop_token>        // stop_token
#include <string>            // string
#include <string_view>       // string_view
#include <system_error>      // system_error, error_code
#include <utility>           // move
#include <vector>            // vector

#include <sys/resource.h>  // rlim_t
#include <sys/types.h>     // uid_t, gid_t

namespace cuda_agent {

/// The complete environment a child sees. Nothing is inherited unless asked for, so a
/// secret in the host's environment cannot leak into a sandbox by accident.
class Environment {
 public:
  Environment() = default;

  /// Only the named variables of the calling process (those that are set).
  template <class Names>
  [[nodiscard]] static Environment from_current(const Names& allowlist);
  [[nodiscard]] static Environment from_current(std::initializer_list<std::string_view> allowlist) {
    return from_current<std::initializer_list<std::string_view>>(allowlist);
  }

  /// Every variable of the calling process; for trusted helpers only.
  [[nodiscard]] static Environment inherit_all();

  Environment& set(std::string name, std::string value) {
    variables_[std::move(name)] = std::move(value);
    return *this;
  }
  Environment& unset(const std::string& name) {
    variables_.erase(name);
    return *this;
  }
  [[nodiscard]] std::optional<std::string> get(const std::string& name) const {
    const auto found = variables_.find(name);
    if (found == variables_.end()) return std::nullopt;
    return found->second;
  }
  [[nodiscard]] const std::map<std::string, std::string>& variables() const noexcept { return variables_; }

  friend bool operator==(const Environment&, const Environment&) = default;

 private:
  std::map<std::string, std::string> variables_;
};

/// A host user and group: the identity sandboxed commands run as, who owns a workspace.
struct UserIdentity {
  uid_t uid;
  gid_t gid;
  friend bool operator==(const UserIdentity&, const UserIdentity&) = default;
};

/// What a sandbox launcher may change in the child between fork and exec.
struct ChildSetup {
  struct Limit {
    int resource;  ///< RLIMIT_CPU, RLIMIT_FSIZE, ...
    rlim_t soft;
    rlim_t hard;
  };
  std::vector<Limit> rlimits;
  /// Credentials to drop to before exec; setgroups() clears supplementary groups.
  std::optional<gid_t> gid;
  std::optional<uid_t> uid;
  /// An open `cgroup.procs` file of a cgroup v2 leaf; the child moves itself into it.
  int cgroup_procs_fd = -1;
  /// setsid() instead of setpgid(0, 0): also detaches from the controlling terminal.
  bool new_session = false;
  /// Descriptors the child keeps across exec (bubblewrap's --args, --ro-bind-data, ...).
  std::vector<int> inherited_fds;
  /// Send SIGKILL to the child if the launching thread dies first.
  bool die_with_parent = true;
};

/// Everything about how one child is started and supervised.
struct ProcessSpec {
  std::vector<std::string> argv;
  Environment environment;
  /// Empty: the caller's working directory.
  std::filesystem::path working_directory;
  /// Written to the child's stdin, which is then closed; without it stdin is /dev/null.
  std::optional<std::string> stdin_data;
  /// Zero means no deadline.
  std::chrono::milliseconds timeout{0};
  /// Time between SIGTERM and SIGKILL once the deadline has passed.
  std::chrono::milliseconds kill_grace{2000};
  /// Bytes kept per stream (head and tail halves); the middle is counted, not stored.
  std::size_t output_limit = std::size_t{1} << 20;
  /// stderr goes to the same pipe as stdout, interleaved as the child wrote it.
  bool merge_stderr = false;
  /// Kill whatever is left in the child's process group once the child has exited.
  bool kill_group_on_exit = true;
  /// Requesting a stop terminates the child as a timeout would.
  std::stop_token cancellation;
  ChildSetup child;
};

/// Bounded capture of one output stream.
struct CapturedOutput {
  /// Head and tail of the stream, with a marker line where bytes were elided.
  std::string text;
  std::uint64_t total_bytes = 0;
  std::uint64_t elided_bytes = 0;

  [[nodiscard]] bool truncated() const noexcept { return elided_bytes != 0; }
};

/// How a child ended. Exit code and terminating signal are reported separately: a
/// shell's 137 and a real SIGKILL are different facts.
struct ProcessResult {
  std::optional<int> exit_code;
  std::optional<int> signal;
  /// The deadline passed and the group was terminated.
  bool timed_out = false;
  /// The stop token fired and the group was terminated.
  bool cancelled = false;
  CapturedOutput standard_output;
  CapturedOutput standard_error;
  std::chrono::nanoseconds wall_time{0};
  std::chrono::microseconds user_cpu_time{0};
  std::chrono::microseconds system_cpu_time{0};
  std::int64_t max_resident_kib = 0;

  /// Exited with status 0 within its deadline.
  [[nodiscard]] bool succeeded() const noexcept { return exit_code == 0 && !timed_out && !cancelled; }
};

/// The child could not be started (no such program, bad working directory, ...).
class ProcessError : public std::system_error {
 public:
  ProcessError(std::error_code code, const std::string& what) : std::system_error(code, what) {}
};

/// Starts `spec.argv` and supervises it to the end. Throws ProcessError when the child
/// cannot be started; every other outcome, including timeouts and signals, is a result.
[[nodiscard]] ProcessResult run_process(const ProcessSpec& spec);

/// Looks `program` up the way execvp would, in the PATH of `environment` (or, if it has
/// none, "/usr/local/bin:/usr/bin:/bin"). Names containing '/' are returned unchanged.
[[nodiscard]] std::optional<std::filesystem::path> find_program(std::string_view program,
                                                                const Environment& environment);

/// A short human-readable account of how a process ended ("exit code 2", "killed by
/// SIGKILL after the 10 s deadline", ...).
[[nodiscard]] std::string describe_exit(const ProcessResult& result);

}  // namespace cuda_agent

#include "cuda_agent/detail/process_posix.hpp"
