// SPDX-License-Identifier: Apache-2.0
#pragma once

// POSIX implementation of cuda_agent/process.hpp. Included from there; not a public header.

#include <algorithm>   // max, min
#include <array>       // array
#include <atomic>      // atomic
#include <cerrno>      // errno, EINTR, EAGAIN, ECHILD
#include <chrono>      // steady_clock
#include <csignal>     // kill, SIGTERM, SIGKILL, sigset_t
#include <cstring>     // strerror, strlen
#include <optional>    // optional
#include <stop_token>  // stop_callback
#include <string>      // string

#include <fcntl.h>         // fcntl, O_CLOEXEC, O_NONBLOCK, open
#include <grp.h>           // setgroups
#include <poll.h>          // poll, pollfd
#include <pthread.h>       // pthread_sigmask
#include <sys/prctl.h>     // prctl, PR_SET_PDEATHSIG
#include <sys/resource.h>  // setrlimit, rusage
#include <sys/syscall.h>   // SYS_pidfd_open, SYS_close_range
#include <sys/wait.h>      // wait4, waitid
#include <unistd.h>        // fork, execve, pipe2, dup2, setpgid, setsid, setresuid, ...

#include "cuda_agent/detail/head_tail_buffer.hpp"

extern char** environ;  // NOLINT: POSIX defines it without a header

namespace cuda_agent {

namespace detail {

inline std::error_code last_error() noexcept { return {errno, std::generic_category()}; }

/// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

inline Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw ProcessError(last_error(), "pipe2 failed");
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

inline void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw ProcessError(last_error(), "fcntl(O_NONBLOCK) failed");
}

/// Opens a pidfd for `pid`, or returns an empty descriptor where the kernel has none.
inline UniqueFd open_pidfd(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return UniqueFd(static_cast<int>(fd));
  }
#else
  (void)pid;
#endif
  return {};
}

/// What the child reports through the error pipe when it cannot reach exec.
struct ChildFailure {
  int error;
  int stage;
};

enum ChildStage : int {
  stage_process_group = 1,
  stage_cgroup,
  stage_redirect,
  stage_rlimit,
  stage_credentials,
  stage_chdir,
  stage_close_fds,
  stage_exec,
};

inline const char* child_stage_name(int stage) noexcept {
  switch (stage) {
    case stage_process_group:
      return "create its process group";
    case stage_cgroup:
      return "join its cgroup";
    case stage_redirect:
      return "redirect its standard streams";
    case stage_rlimit:
      return "apply its resource limits";
    case stage_credentials:
      return "drop its credentials";
    case stage_chdir:
      return "enter its working directory";
    case stage_close_fds:
      return "close inherited descriptors";
    case stage_exec:
      return "execute";
    default:
      return "start";
  }
}

/// Marks every descriptor from 3 upwards close-on-exec, except the listed ones.
/// Async-signal-safe: runs in the forked child.
inline bool mark_descriptors_cloexec(const int* keep, std::size_t keep_count) noexcept {
  bool done = false;
#if defined(SYS_close_range) && defined(CLOSE_RANGE_CLOEXEC)
  done = ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) == 0;
#elif defined(SYS_close_range)
  done = ::syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */) == 0;
#endif
  if (!done) {
    rlimit limit{};
    rlim_t highest = 65536;
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      highest = std::min<rlim_t>(limit.rlim_cur, 1 << 20);
    for (int fd = 3; fd < static_cast<int>(highest); ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  for (std::size_t i = 0; i < keep_count; ++i)
    if (::fcntl(keep[i], F_SETFD, 0) != 0) return false;
  return true;
}

[[noreturn]] inline void child_fail(int error_fd, int stage) noexcept {
  const ChildFailure failure{errno, stage};
  [[maybe_unused]] const auto written = ::write(error_fd, &failure, sizeof failure);
  ::_exit(127);
}

/// Everything the child needs, prepared before fork so that the child only makes
/// async-signal-safe calls.
struct PreparedChild {
  std::string executable;
  std::vector<std::string> argument_storage;
  std::vector<char*> arguments;
  std::vector<std::string> environment_storage;
  std::vector<char*> environment;
  std::string working_directory;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int error_fd = -1;
  const ChildSetup* setup = nullptr;
};

[[noreturn]] inline void run_child(const PreparedChild& child) noexcept {
  const ChildSetup& setup = *child.setup;

  // Signal dispositions set by the parent (ignored SIGPIPE, handlers) must not leak
  // into the program; the parent blocked every signal around fork.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal_number = 1; signal_number < NSIG; ++signal_number)
    ::sigaction(signal_number, &default_action, nullptr);
  sigset_t empty;
  ::sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);

  if (setup.new_session ? ::setsid() < 0 : ::setpgid(0, 0) != 0) child_fail(child.error_fd, stage_process_group);

  if (setup.cgroup_procs_fd >= 0 && ::write(setup.cgroup_procs_fd, "0", 1) != 1)
    child_fail(child.error_fd, stage_cgroup);

  if (::dup2(child.stdin_fd, STDIN_FILENO) < 0 || ::dup2(child.stdout_fd, STDOUT_FILENO) < 0 ||
      ::dup2(child.stderr_fd, STDERR_FILENO) < 0)
    child_fail(child.error_fd, stage_redirect);

  for (const ChildSetup::Limit& limit : setup.rlimits) {
    const rlimit value{limit.soft, limit.hard};
    if (::setrlimit(limit.resource, &value) != 0) child_fail(child.error_fd, stage_rlimit);
  }

  if (setup.gid) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(*setup.gid, *setup.gid, *setup.gid) != 0)
      child_fail(child.error_fd, stage_credentials);
  }
  if (setup.uid && ::setresuid(*setup.uid, *setup.uid, *setup.uid) != 0) child_fail(child.error_fd, stage_credentials);
  // After the credential change, which would clear it.
  if (setup.die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);

  if (!child.working_directory.empty() && ::chdir(child.working_directory.c_str()) != 0)
    child_fail(child.error_fd, stage_chdir);

  if (!mark_descriptors_cloexec(setup.inherited_fds.data(), setup.inherited_fds.size()))
    child_fail(child.error_fd, stage_close_fds);

  ::execve(child.executable.c_str(), child.arguments.data(), child.environment.data());
  child_fail(child.error_fd, stage_exec);
}

/// Blocks every signal in the calling thread for its lifetime, so that the forked child
/// cannot run a parent's handler before it has reset the dispositions.
class BlockAllSignals {
 public:
  BlockAllSignals() noexcept {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous_);
  }
  ~BlockAllSignals() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockAllSignals(const BlockAllSignals&) = delete;
  BlockAllSignals& operator=(const BlockAllSignals&) = delete;

 private:
  sigset_t previous_{};
};

/// Writes to a pipe without letting SIGPIPE kill the process when the reader has gone.
inline ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) noexcept {
  sigset_t pipe_only;
  sigset_t previous;
  ::sigemptyset(&pipe_only);
  ::sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
  ssize_t written;
  do {
    written = ::write(fd, data, size);
  } while (written < 0 && errno == EINTR);
  if (written < 0 && errno == EPIPE) {
    const int saved = errno;
    sigset_t pending;
    ::sigpending(&pending);
    if (::sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      ::sigtimedwait(&pipe_only, nullptr, &zero);
    }
    errno = saved;
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return written;
}

/// Wakes a poll() loop from another thread when a stop is requested.
class StopWakeup {
 public:
  explicit StopWakeup(const std::stop_token& token) {
    if (!token.stop_possible()) return;
    pipe_ = make_pipe();
    set_nonblocking(pipe_.write.get());
    callback_.emplace(token, Notify{pipe_.write.get()});
  }
  [[nodiscard]] int fd() const noexcept { return pipe_.read ? pipe_.read.get() : -1; }

 private:
  struct Notify {
    int fd;
    void operator()() const noexcept { [[maybe_unused]] const auto n = ::write(fd, "x", 1); }
  };
  Pipe pipe_;
  std::optional<std::stop_callback<Notify>> callback_;
};

inline std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGSYS:
      return "SIGSYS";
    default:
      return "signal " + std::to_string(signal_number);
  }
}

}  // namespace detail

template <class Names>
Environment Environment::from_current(const Names& allowlist) {
  Environment result;
  for (const auto& name : allowlist) {
    // NOLINTNEXTLINE(performance-unnecessary-copy-initialization): Names may hold views; getenv needs a C string
    const std::string key(name);
    if (const char* value = ::getenv(key.c_str())) result.set(key, value);
  }
  return result;
}

inline Environment Environment::inherit_all() {
  Environment result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (equals == std::string_view::npos || equals == 0) continue;
    result.set(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return result;
}

inline std::optional<std::filesystem::path> find_program(std::string_view program, const Environment& environment) {
  if (program.empty()) return std::nullopt;
  if (program.find('/') != std::string_view::npos) return std::filesystem::path(program);
  const std::string search = environment.get("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  std::string_view remaining = search;
  while (true) {
    const auto colon = remaining.find(':');
    std::string_view directory = remaining.substr(0, colon);
    if (directory.empty()) directory = ".";
    const std::filesystem::path candidate = std::filesystem::path(directory) / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    remaining.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

inline ProcessResult run_process(const ProcessSpec& spec) {
  using namespace detail;
  using clock = std::chrono::steady_clock;

  if (spec.argv.empty() || spec.argv.front().empty())
    throw ProcessError(std::make_error_code(std::errc::invalid_argument), "run_process: empty argv");
  const auto executable = find_program(spec.argv.front(), spec.environment);
  if (!executable)
    throw ProcessError(std::make_error_code(std::errc::no_such_file_or_directory),
                       "cannot execute '" + spec.argv.front() + "': not found in PATH");

  PreparedChild child;
  child.executable = executable->string();
  child.argument_storage = spec.argv;
  for (std::string& argument : child.argument_storage) child.arguments.push_back(argument.data());
  child.arguments.push_back(nullptr);
  for (const auto& [name, value] : spec.environment.variables())
    child.environment_storage.push_back(name + "=" + value);
  for (std::string& entry : child.environment_storage) child.environment.push_back(entry.data());
  child.environment.push_back(nullptr);
  child.working_directory = spec.working_directory.string();
  child.setup = &spec.child;

  UniqueFd null_input;
  Pipe input;
  if (spec.stdin_data) {
    input = make_pipe();
    child.stdin_fd = input.read.get();
  } else {
    null_input.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!null_input) throw ProcessError(last_error(), "cannot open /dev/null");
    child.stdin_fd = null_input.get();
  }
  Pipe output = make_pipe();
  Pipe error_output;
  child.stdout_fd = output.write.get();
  if (spec.merge_stderr) {
    child.stderr_fd = output.write.get();
  } else {
    error_output = make_pipe();
    child.stderr_fd = error_output.write.get();
  }
  Pipe exec_status = make_pipe();
  child.error_fd = exec_status.write.get();

  const auto started = clock::now();
  pid_t pid;
  {
    BlockAllSignals blocked;
    pid = ::fork();
    if (pid == 0) run_child(child);
  }
  if (pid < 0) throw ProcessError(last_error(), "fork failed");

  // The child calls setpgid itself; repeating it here closes the window in which a
  // timeout could signal a group that does not exist yet.
  if (!spec.child.new_session) ::setpgid(pid, pid);

  input.read.reset();
  null_input.reset();
  output.write.reset();
  error_output.write.reset();
  exec_status.write.reset();

  // Exec closes the status pipe (CLOEXEC); anything read from it is a failure report.
  ChildFailure failure{};
  ssize_t status_bytes;
  do {
    status_bytes = ::read(exec_status.read.get(), &failure, sizeof failure);
  } while (status_bytes < 0 && errno == EINTR);
  if (status_bytes == static_cast<ssize_t>(sizeof failure)) {
    int ignored;
    while (::waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    throw ProcessError(std::error_code(failure.error, std::generic_category()),
                       "cannot " + std::string(child_stage_name(failure.stage)) + " '" + spec.argv.front() + "'");
  }

  const pid_t group = pid;
  UniqueFd pidfd = open_pidfd(pid);
  StopWakeup wakeup(spec.cancellation);

  HeadTailBuffer out_buffer(spec.output_limit);
  HeadTailBuffer err_buffer(spec.output_limit);
  std::size_t input_offset = 0;
  if (input.write) {
    set_nonblocking(input.write.get());
    if (spec.stdin_data->empty()) input.write.reset();
  }
  set_nonblocking(output.read.get());
  if (error_output.read) set_nonblocking(error_output.read.get());

  ProcessResult result;
  const bool has_deadline = spec.timeout.count() > 0;
  const auto deadline = started + spec.timeout;
  std::optional<clock::time_point> kill_at;  // set once SIGTERM has been sent
  bool exited = false;
  int wait_status = 0;
  rusage usage{};
  std::optional<clock::time_point> drain_until;  // after exit: stop waiting for EOF then

  auto terminate_group = [&](bool timed_out) {
    if (kill_at) return;
    (timed_out ? result.timed_out : result.cancelled) = true;
    ::kill(-group, SIGTERM);
    kill_at = clock::now() + spec.kill_grace;
  };

  // Reaps the child if it has exited. The group is killed while the child is still a
  // zombie, because its pid (and so the group id) cannot be reused before it is reaped.
  auto try_reap = [&]() {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (spec.kill_group_on_exit || kill_at) ::kill(-group, SIGKILL);
    pid_t reaped;
    do {
      reaped = ::wait4(pid, &wait_status, 0, &usage);
    } while (reaped < 0 && errno == EINTR);
    exited = true;
    result.wall_time = clock::now() - started;
    drain_until = clock::now() + std::chrono::milliseconds(250);
  };

  std::array<char, 65536> chunk{};
  while (true) {
    if (!exited) try_reap();
    const bool outputs_open = output.read || error_output.read;
    if (exited && (!outputs_open || clock::now() >= *drain_until)) break;

    const auto now = clock::now();
    if (!exited) {
      if (has_deadline && now >= deadline) terminate_group(true);
      if (kill_at && now >= *kill_at) ::kill(-group, SIGKILL);
    }

    // How long poll may sleep: until the next deadline, and briefly where no pidfd
    // can announce the child's exit.
    auto wait_for = std::chrono::milliseconds(pidfd ? 1000 : 10);
    auto clamp_to = [&](clock::time_point when) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(when - now);
      wait_for = std::min(wait_for, std::max(left, std::chrono::milliseconds(0)));
    };
    if (!exited && has_deadline && !kill_at) clamp_to(deadline);
    if (!exited && kill_at) clamp_to(*kill_at + std::chrono::milliseconds(1));
    if (exited) clamp_to(*drain_until);

    std::array<pollfd, 5> fds{};
    std::size_t count = 0;
    auto watch = [&](int fd, short events) {
      if (fd >= 0) fds[count++] = pollfd{fd, events, 0};
    };
    watch(output.read.get(), POLLIN);
    watch(error_output.read.get(), POLLIN);
    watch(input.write.get(), POLLOUT);
    if (!exited) watch(pidfd.get(), POLLIN);
    if (!exited && !kill_at) watch(wakeup.fd(), POLLIN);

    const int ready = ::poll(fds.data(), count, static_cast<int>(wait_for.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;
      ::kill(-group, SIGKILL);
      throw ProcessError(last_error(), "poll failed while supervising '" + spec.argv.front() + "'");
    }

    auto drain = [&](UniqueFd& fd, HeadTailBuffer& buffer) {
      if (!fd) return;
      while (true) {
        const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
        if (n > 0) {
          buffer.append(std::string_view(chunk.data(), static_cast<std::size_t>(n)));
          continue;
        }
        if (n == 0)
          fd.reset();
        else if (errno == EINTR)
          continue;
        else if (errno != EAGAIN && errno != EWOULDBLOCK)
          fd.reset();
        return;
      }
    };
    drain(output.read, out_buffer);
    drain(error_output.read, err_buffer);

    if (input.write) {
      const std::string& data = *spec.stdin_data;
      const ssize_t n =
          write_without_sigpipe(input.write.get(), data.data() + input_offset, data.size() - input_offset);
      if (n > 0) input_offset += static_cast<std::size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || input_offset == data.size()) input.write.reset();
    }

    if (wakeup.fd() >= 0 && spec.cancellation.stop_requested() && !exited) terminate_group(false);
  }

  if (WIFEXITED(wait_status)) result.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) result.signal = WTERMSIG(wait_status);
  result.standard_output = {out_buffer.text(), out_buffer.total_bytes(), out_buffer.elided_bytes()};
  result.standard_error = {err_buffer.text(), err_buffer.total_bytes(), err_buffer.elided_bytes()};
  result.user_cpu_time =
      std::chrono::seconds(usage.ru_utime.tv_sec) + std::chrono::microseconds(usage.ru_utime.tv_usec);
  result.system_cpu_time =
      std::chrono::seconds(usage.ru_stime.tv_sec) + std::chrono::microseconds(usage.ru_stime.tv_usec);
  result.max_resident_kib = usage.ru_maxrss;
  return result;
}

inline std::string describe_exit(const ProcessResult& result) {
  std::string text;
  if (result.signal)
    text = "killed by " + detail::signal_name(*result.signal);
  else if (result.exit_code)
    text = "exit code " + std::to_string(*result.exit_code);
  else
    text = "unknown status";
  if (result.timed_out) text += " after its deadline";
  if (result.cancelled) text += " after cancellation";
  return text;
}

}  // namespace cuda_agent
