// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// One warm worker process of the Python evaluation harness, confined by a sandbox.
///
/// A worker imports torch once (4 to 5 s on a large machine) and then serves requests, each
/// in a child it forks for the purpose (tens of milliseconds), so that a verification costs
/// what its own work costs. Requests and replies are JSON lines over two FIFOs that the
/// host creates in a directory of its own; the worker opens them at start, and the host
/// removes them as soon as the worker said it is ready, so that no process started later
/// inside the sandbox (a candidate) can reach the channel. See the harness's `worker/dispatch.py`
/// for the protocol.
///
/// The worker runs through any `Sandbox` (its `run` blocks for the worker's lifetime, on a
/// thread of its own). A worker that dies, hangs or answers out of protocol is restarted
/// on the next request; a request that does not finish in time is cancelled.

#include <algorithm>     // min
#include <atomic>        // atomic
#include <cerrno>        // errno, EINTR, EAGAIN
#include <chrono>        // milliseconds, steady_clock
#include <cstring>       // strerror
#include <filesystem>    // path, remove, create_directories
#include <functional>    // function
#include <memory>        // unique_ptr, shared_ptr, make_unique, make_shared
#include <optional>      // optional
#include <random>        // random_device
#include <stdexcept>     // runtime_error
#include <stop_token>    // stop_source
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // system_error
#include <thread>        // jthread
#include <utility>       // move
#include <vector>        // vector

#include <fcntl.h>     // open, O_RDWR, O_RDONLY, O_NONBLOCK
#include <poll.h>      // poll
#include <sys/stat.h>  // mkfifo, chmod
#include <unistd.h>    // read, write

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/ownership.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"

namespace cuda_agent {

/// The harness itself failed (a worker would not start, died, or broke the protocol).
/// What a candidate does is never reported this way.
class HarnessError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HarnessWorkerOptions {
  /// "reference" or "candidate": which side of a verification the worker serves.
  std::string role;
  /// "cpu" or "cuda".
  std::string device = "cuda";
  /// The Python interpreter with torch.
  std::filesystem::path python = "python3";
  /// The directory that contains the `cuda_agent_harness` package.
  std::filesystem::path harness_directory;
  /// A directory only the host writes, where the worker's FIFOs are created. The sandbox
  /// must let the worker open them (at the same path).
  std::filesystem::path channel_directory;
  /// uid and gid the worker runs as, when the host is root: the FIFOs are given to them.
  std::optional<UserIdentity> owner;
  /// Directories inside the sandbox whose new entries the worker deletes after every
  /// request (the sandbox's private /tmp and /dev/shm, so that nothing passes between
  /// requests through them).
  std::vector<std::string> scrub_directories;
  /// Environment variables for the worker, on top of the sandbox's own.
  Environment environment;
  /// Resource limits of the worker (and so of the children it forks).
  ResourceLimits limits;
  std::chrono::milliseconds startup_timeout{std::chrono::minutes(5)};
  /// Fork the child of the next verification or timing request ahead of it and let it
  /// prepare the device (on CUDA: context, allocator, thread pools; 0.3 to 0.5 s) while
  /// the worker waits; the reference side of a verification then took 168 ms instead of
  /// 659 ms on the H200. The next one is forked while a verification runs, and after a
  /// timing session (never during one). The idle child holds a CUDA context (about 0.5 GB
  /// of device memory). The GPU adversarial suite passes with it on and with it off.
  bool prepared_child = true;
  /// How long the worker process may live; it is restarted afterwards.
  std::chrono::milliseconds lifetime{std::chrono::hours(24)};
};

/// What the worker reported about one request.
struct HarnessReply {
  /// The full "done" message (result, error, exit_code, signal, timed_out, stragglers, ...).
  nlohmann::json message;

  [[nodiscard]] const nlohmann::json& result() const { return message.at("result"); }
  [[nodiscard]] bool has_result() const { return message.contains("result") && !message["result"].is_null(); }
  [[nodiscard]] bool has_error() const { return message.contains("error") && !message["error"].is_null(); }
  [[nodiscard]] bool timed_out() const { return message.value("timed_out", false); }
  [[nodiscard]] std::optional<int> signal() const {
    const auto found = message.find("signal");
    if (found == message.end() || !found->is_number_integer()) return std::nullopt;
    return found->get<int>();
  }
  [[nodiscard]] std::optional<int> exit_code() const {
    const auto found = message.find("exit_code");
    if (found == message.end() || !found->is_number_integer()) return std::nullopt;
    return found->get<int>();
  }
  [[nodiscard]] int stragglers() const { return message.value("stragglers", 0); }
  [[nodiscard]] std::string output() const { return message.value("output", std::string()); }
  /// "TypeError: message" of an exception the handler raised, or empty.
  [[nodiscard]] std::string error_text() const {
    if (!has_error()) return {};
    const nlohmann::json& error = message["error"];
    return error.value("type", std::string("Error")) + ": " + error.value("message", std::string());
  }
};

namespace detail {

/// Reads JSON lines from a non-blocking descriptor.
class JsonLineReader {
 public:
  explicit JsonLineReader(int fd, std::size_t line_limit = std::size_t{64} << 20) : fd_(fd), limit_(line_limit) {}

  /// The next line as JSON, waiting until `deadline`; nullopt when the deadline passed.
  /// Throws HarnessError when the writer is gone or sends something unreadable.
  std::optional<nlohmann::json> next(std::chrono::steady_clock::time_point deadline,
                                     const std::function<bool()>& writer_alive) {
    while (true) {
      if (const auto newline = buffer_.find('\n'); newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object())
          throw HarnessError("the harness worker wrote a line that is not a JSON object: " + line.substr(0, 200));
        return parsed;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd watch{fd_, POLLIN, 0};
      const int ready = ::poll(&watch, 1, static_cast<int>(std::min<long long>(left.count(), 200)));
      if (ready < 0 && errno != EINTR)
        throw HarnessError(std::string("poll on the worker channel: ") + std::strerror(errno));
      if (ready <= 0) {
        if (!writer_alive()) throw HarnessError("the harness worker exited");
        continue;
      }
      char chunk[65536];
      const ssize_t count = ::read(fd_, chunk, sizeof chunk);
      if (count < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (count <= 0) {
        if (!writer_alive()) throw HarnessError("the harness worker exited");
        // No writer yet, or it just closed: wait for the worker thread to notice.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      buffer_.append(chunk, static_cast<std::size_t>(count));
      if (buffer_.size() > limit_ && buffer_.find('\n') == std::string::npos)
        throw HarnessError("the harness worker wrote a line longer than " + std::to_string(limit_) + " bytes");
    }
  }

  void clear() { buffer_.clear(); }

 private:
  int fd_;
  std::size_t limit_;
  std::string buffer_;
};

inline std::string random_hex(std::size_t bytes) {
  std::random_device entropy;
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < bytes; ++i) {
    const unsigned value = entropy() & 0xffU;
    text += digits[value >> 4];
    text += digits[value & 0xfU];
  }
  return text;
}

inline void make_fifo(const std::filesystem::path& path, const std::optional<UserIdentity>& owner) {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  if (::mkfifo(path.c_str(), 0600) != 0)
    throw HarnessError("cannot create the FIFO " + path.string() + ": " + std::strerror(errno));
  if (!owner || !running_as_root()) return;
  try {
    give_path_to(path, *owner);
  } catch (const std::system_error& error) {
    throw HarnessError("cannot give the FIFO " + path.string() + " to the sandbox user: " + error.code().message());
  }
}

inline void write_all(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written > 0) {
      data.remove_prefix(static_cast<std::size_t>(written));
      continue;
    }
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && errno == EAGAIN) {
      if (std::chrono::steady_clock::now() > deadline)
        throw HarnessError("the harness worker stopped reading requests");
      pollfd watch{fd, POLLOUT, 0};
      ::poll(&watch, 1, 100);
      continue;
    }
    throw HarnessError(std::string("cannot write to the harness worker: ") + std::strerror(errno));
  }
}

}  // namespace detail

/// One worker. Not copyable; movable only before it started. Member functions are not
/// meant to be called from several threads at once.
class HarnessWorker {
 public:
  HarnessWorker(AnySandbox sandbox, HarnessWorkerOptions options)
      : sandbox_(std::make_unique<AnySandbox>(std::move(sandbox))), options_(std::move(options)) {
    if (options_.role.empty()) throw std::invalid_argument("HarnessWorker needs a role");
    if (options_.harness_directory.empty() || options_.channel_directory.empty())
      throw std::invalid_argument("HarnessWorker needs the harness and channel directories");
  }
  HarnessWorker(const HarnessWorker&) = delete;
  HarnessWorker& operator=(const HarnessWorker&) = delete;
  ~HarnessWorker() { stop(); }

  [[nodiscard]] const HarnessWorkerOptions& options() const noexcept { return options_; }
  [[nodiscard]] bool running() const noexcept { return state_ && !state_->finished.load(); }
  /// The worker's "ready" message (torch version, pid, handlers), once started.
  [[nodiscard]] const nlohmann::json& ready_message() const noexcept { return ready_; }

  /// Starts the worker if it does not run. Throws HarnessError (with the worker's own
  /// output) when it does not become ready in time.
  void start() {
    if (running() && ready_.is_object()) return;
    stop();
    std::filesystem::create_directories(options_.channel_directory);
    const std::filesystem::path requests = options_.channel_directory / "requests";
    const std::filesystem::path replies = options_.channel_directory / "replies";
    detail::make_fifo(requests, options_.owner);
    detail::make_fifo(replies, options_.owner);
    // Read-write: never blocks, and the worker sees end of file only when the host closes it.
    requests_fd_.reset(::open(requests.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK));
    replies_fd_.reset(::open(replies.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!requests_fd_ || !replies_fd_)
      throw HarnessError("cannot open the worker channel in " + options_.channel_directory.string() + ": " +
                         std::strerror(errno));
    reader_.emplace(replies_fd_.get());

    Command command;
    const std::string bootstrap = "import sys; sys.path.insert(0, " +
                                  python_string(options_.harness_directory.string()) +
                                  "); from cuda_agent_harness.worker.startup import main; sys.exit(main(sys.argv[1:]))";
    command.argv = {options_.python.string(),
                    "-I",
                    "-B",
                    "-c",
                    bootstrap,
                    "--role",
                    options_.role,
                    "--device",
                    options_.device,
                    "--requests",
                    requests.string(),
                    "--replies",
                    replies.string()};
    for (const std::string& directory : options_.scrub_directories) {
      command.argv.push_back("--scrub");
      command.argv.push_back(directory);
    }
    if (!options_.prepared_child) command.argv.push_back("--no-prepared-child");
    command.environment = options_.environment;
    command.timeout = options_.lifetime;
    command.output_limit = 64 * 1024;
    command.merge_stderr = true;
    command.limits = options_.limits;
    state_ = std::make_shared<State>();
    command.cancellation = state_->stop.get_token();
    auto state = state_;
    AnySandbox* sandbox = sandbox_.get();
    state_->thread = std::jthread([state, sandbox, command = std::move(command)] {
      try {
        state->result = sandbox->run(command);
      } catch (const std::exception& error) {
        state->failure = error.what();
      }
      state->finished.store(true);
    });

    const auto deadline = std::chrono::steady_clock::now() + options_.startup_timeout;
    std::optional<nlohmann::json> message;
    try {
      message = reader_->next(deadline, [state] { return !state->finished.load(); });
    } catch (const HarnessError&) {
      message.reset();
    }
    if (!message || message->value("event", "") != "ready") {
      std::string why =
          !message ? "it did not answer within " + std::to_string(options_.startup_timeout.count() / 1000) + " s"
                   : "it reported: " + message->value("message", message->dump());
      stop();
      throw HarnessError("the " + options_.role + " harness worker did not start (" + why + ")" + last_output());
    }
    ready_ = std::move(*message);
    // From now on the channel is reachable only through the descriptors already open.
    std::error_code ignored;
    std::filesystem::remove(requests, ignored);
    std::filesystem::remove(replies, ignored);
  }

  /// Sends a request; returns its id. Starts (or restarts) the worker when needed.
  std::string submit(std::string_view handler, const nlohmann::json& arguments, std::chrono::milliseconds timeout) {
    start();
    std::string id = detail::random_hex(8);
    const nlohmann::json request = {
        {"id", id}, {"handler", handler}, {"args", arguments}, {"timeout_ms", static_cast<double>(timeout.count())}};
    send(request, std::chrono::seconds(30));
    return id;
  }

  /// Waits for the reply to request `id`. `on_event` receives the events the handler
  /// emits. The worker itself enforces the request's timeout; `deadline` is the host's
  /// limit on top of it, after which the worker is considered broken and restarted.
  HarnessReply wait(const std::string& id, std::chrono::steady_clock::time_point deadline,
                    const std::function<void(const nlohmann::json&)>& on_event = {}) {
    auto state = state_;
    if (!state || !reader_) throw HarnessError("the " + options_.role + " harness worker is not running");
    while (true) {
      std::optional<nlohmann::json> message;
      try {
        message = reader_->next(deadline, [state] { return !state->finished.load(); });
      } catch (const HarnessError& error) {
        stop();
        throw HarnessError("the " + options_.role + " harness worker failed: " + error.what() + last_output());
      }
      if (!message) {
        stop();
        throw HarnessError("the " + options_.role + " harness worker did not answer in time; it was restarted");
      }
      if (message->value("id", "") != id) continue;  // a reply to a request abandoned earlier
      if (message->value("done", false)) return HarnessReply{std::move(*message)};
      if (on_event && message->contains("event")) on_event((*message)["event"]);
    }
  }

  /// Asks the worker to end the child of request `id` (its reply still comes).
  void cancel(const std::string& id) {
    if (!running()) return;
    try {
      send({{"cancel", id}}, std::chrono::seconds(5));
    } catch (const HarnessError&) {  // the worker was stopped: nothing is left to cancel
    }
  }

  /// Waits until every child of an earlier request has exited. A child that has reported
  /// its result is ended without waiting for its exit (a CUDA process takes 0.1 to 0.3 s
  /// to let go of the device), so that exit overlaps what follows; whoever times something
  /// next settles every worker first. Returns the milliseconds the worker waited.
  double settle(std::chrono::steady_clock::time_point deadline) {
    start();
    const std::string id = detail::random_hex(8);
    send({{"id", id}, {"settle", true}}, std::chrono::seconds(5));
    const HarnessReply reply = wait(id, deadline);
    return reply.has_result() ? reply.result().value("waited_ms", 0.0) : 0.0;
  }

  /// Submits and waits.
  HarnessReply call(std::string_view handler, const nlohmann::json& arguments, std::chrono::milliseconds timeout,
                    const std::function<void(const nlohmann::json&)>& on_event = {}) {
    const std::string id = submit(handler, arguments, timeout);
    return wait(id, std::chrono::steady_clock::now() + timeout + std::chrono::seconds(30), on_event);
  }

  /// Ends the worker (politely, then by cancelling its sandboxed command).
  void stop() {
    if (!state_) return;
    if (requests_fd_ && !state_->finished.load()) {
      const std::string shutdown = nlohmann::json{{"shutdown", true}}.dump() + "\n";
      [[maybe_unused]] const auto written = ::write(requests_fd_.get(), shutdown.data(), shutdown.size());
    }
    requests_fd_.reset();
    const auto patience = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!state_->finished.load() && std::chrono::steady_clock::now() < patience)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state_->stop.request_stop();
    if (state_->thread.joinable()) state_->thread.join();
    last_result_ = state_->result;
    last_failure_ = state_->failure;
    state_.reset();
    replies_fd_.reset();
    reader_.reset();
    ready_ = nullptr;
  }

 private:
  struct State {
    std::stop_source stop;
    std::atomic<bool> finished{false};
    std::optional<CommandResult> result;
    std::string failure;
    std::jthread thread;
  };

  static std::string python_string(const std::string& text) { return nlohmann::json(text).dump(); }

  /// Writes one message to the worker; a worker that does not take it within `patience`
  /// is stopped (HarnessError). Candidate sources may hold bytes that are not UTF-8: they
  /// travel replaced.
  void send(const nlohmann::json& message, std::chrono::seconds patience) {
    try {
      detail::write_all(requests_fd_.get(),
                        message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                        std::chrono::steady_clock::now() + patience);
    } catch (const HarnessError&) {
      stop();
      throw;
    }
  }

  std::string last_output() const {
    std::string text;
    const std::optional<CommandResult>& result = state_ ? state_->result : last_result_;
    const std::string& failure = state_ ? state_->failure : last_failure_;
    if (!failure.empty()) text += "\nsandbox: " + failure;
    if (result) {
      text += "\nworker " + describe_exit(*result);
      if (!result->standard_output.text.empty()) text += "; its output:\n" + result->standard_output.text;
    }
    return text;
  }

  std::unique_ptr<AnySandbox> sandbox_;
  HarnessWorkerOptions options_;
  std::shared_ptr<State> state_;
  detail::UniqueFd requests_fd_;
  detail::UniqueFd replies_fd_;
  std::optional<detail::JsonLineReader> reader_;
  nlohmann::json ready_;
  std::optional<CommandResult> last_result_;
  std::string last_failure_;
};

}  // namespace cuda_agent
