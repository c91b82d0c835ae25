// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Sandbox` concept: run one command confined to a workspace, with limits and a
/// deadline, and report how it ended. `AnySandbox` stores any conforming type.

#include <chrono>       // milliseconds, seconds
#include <concepts>     // same_as
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <filesystem>   // path
#include <memory>       // unique_ptr, make_unique
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <stop_token>   // stop_token
#include <string>       // string
#include <string_view>  // string_view
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/process.hpp"

namespace cuda_agent {

/// Resource limits for one command. Unset means the sandbox's default.
struct ResourceLimits {
  std::optional<std::chrono::seconds> cpu_time;
  std::optional<std::uint64_t> file_size_bytes;
  std::optional<std::uint64_t> open_files;
  /// Resident memory; enforced through cgroup v2 only (RLIMIT_AS would break CUDA).
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> processes;
};

enum class LimitKind { wall_time, cpu_time, file_size, open_files, memory, processes };

[[nodiscard]] constexpr std::string_view to_string(LimitKind kind) noexcept {
  switch (kind) {
    case LimitKind::wall_time:
      return "wall_time";
    case LimitKind::cpu_time:
      return "cpu_time";
    case LimitKind::file_size:
      return "file_size";
    case LimitKind::open_files:
      return "open_files";
    case LimitKind::memory:
      return "memory";
    case LimitKind::processes:
      return "processes";
  }
  return "wall_time";
}

/// Whether one requested limit was put in place, and how.
struct LimitStatus {
  LimitKind kind;
  bool enforced = false;
  /// "rlimit", "cgroup v2", "timer", ...
  std::string mechanism;
  /// Why it could not be enforced, or what it means in practice.
  std::string note;
};

/// One command to run inside a sandbox.
struct Command {
  std::vector<std::string> argv;
  /// Variables added to the sandbox's own minimal environment.
  Environment environment;
  /// Inside the sandbox; empty means the workspace root.
  std::filesystem::path working_directory;
  std::optional<std::string> stdin_data;
  std::chrono::milliseconds timeout{120'000};
  std::size_t output_limit = 64 * 1024;
  bool merge_stderr = true;
  ResourceLimits limits;
  std::stop_token cancellation;
};

/// How a sandboxed command ended.
struct CommandResult : ProcessResult {
  /// False for sandboxes that run commands without confinement (ProcessSandbox).
  bool confined = false;
  /// Which sandbox ran it ("bubblewrap", "process", ...).
  std::string sandbox;
  /// Limits that were hit (the memory limit's OOM kill, SIGXFSZ, SIGXCPU, the deadline).
  std::vector<LimitKind> limits_hit;
  /// For each limit in force, whether it was enforced and by what.
  std::vector<LimitStatus> limits;

  [[nodiscard]] bool hit(LimitKind kind) const noexcept {
    for (LimitKind each : limits_hit)
      if (each == kind) return true;
    return false;
  }
};

/// The sandbox itself could not run the command (missing bubblewrap, unusable
/// workspace, no unprivileged user to drop to, ...). What the command did is never
/// reported this way: that is a CommandResult.
class SandboxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs untrusted commands.
///
/// Required expressions, for `S& sandbox` and `const Command& command`:
///   - `sandbox.run(command)` returns a `CommandResult`. Whatever the command does
///     (fail, hang, exhaust memory, flood output, ignore SIGTERM, fork away) ends in a
///     result, and when it returns no process of the command is left running.
///     `SandboxError` is thrown only when the sandbox cannot be set up at all.
///
/// A result says whether the command ran confined; a sandbox that does not confine must
/// say so, and using one is an explicit decision of the host application.
///
/// A minimal conforming type (unconfined, so only for trusted commands):
/// @code{.cpp}
/// struct DirectSandbox {
///   cuda_agent::CommandResult run(const cuda_agent::Command& command) {
///     cuda_agent::ProcessSpec spec;
///     spec.argv = command.argv;
///     spec.environment = command.environment;
///     spec.timeout = command.timeout;
///     return cuda_agent::CommandResult{cuda_agent::run_process(spec), false, "direct", {}, {}};
///   }
/// };
/// static_assert(cuda_agent::Sandbox<DirectSandbox>);
/// @endcode
template <class S>
concept Sandbox = requires(S& sandbox, const Command& command) {
  { sandbox.run(command) } -> std::same_as<CommandResult>;
};

/// Holds any `Sandbox` by value (move-only) behind one type.
class AnySandbox {
 public:
  template <class S>
  requires(Sandbox<std::remove_cvref_t<S>> && !std::is_same_v<std::remove_cvref_t<S>, AnySandbox>)
      AnySandbox(S&& sandbox)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<S>>>(std::forward<S>(sandbox))) {}

  AnySandbox(AnySandbox&&) noexcept = default;
  AnySandbox& operator=(AnySandbox&&) noexcept = default;

  [[nodiscard]] CommandResult run(const Command& command) { return self_->run(command); }

  template <class S>
  [[nodiscard]] S* target() noexcept {
    auto* model = dynamic_cast<Model<S>*>(self_.get());
    return model ? &model->sandbox : nullptr;
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual CommandResult run(const Command& command) = 0;
  };
  template <class S>
  struct Model final : Interface {
    explicit Model(S value) : sandbox(std::move(value)) {}
    CommandResult run(const Command& command) override { return sandbox.run(command); }
    S sandbox;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(Sandbox<AnySandbox>);

/// Refers to a sandbox owned elsewhere, behind one type, without owning it: how the
/// agent loop lends its sandbox to the tools of an episode. The sandbox must outlive it.
class SandboxRef {
 public:
  template <class S>
  // NOLINTNEXTLINE(google-explicit-constructor): a reference, converting on purpose
  requires(Sandbox<S> && !std::is_same_v<std::remove_cvref_t<S>, SandboxRef>) SandboxRef(S& sandbox)
  noexcept
      : object_(&sandbox),
        run_([](void* object, const Command& command) { return static_cast<S*>(object)->run(command); }) {}

  [[nodiscard]] CommandResult run(const Command& command) const { return run_(object_, command); }

 private:
  void* object_;
  CommandResult (*run_)(void*, const Command&);
};

static_assert(Sandbox<SandboxRef>);

inline void to_json(nlohmann::json& out, const CapturedOutput& output) {
  out = {{"text", output.text}, {"total_bytes", output.total_bytes}, {"elided_bytes", output.elided_bytes}};
}

inline void to_json(nlohmann::json& out, const CommandResult& result) {
  out = {{"sandbox", result.sandbox},
         {"confined", result.confined},
         {"exit_code", result.exit_code ? nlohmann::json(*result.exit_code) : nlohmann::json(nullptr)},
         {"signal", result.signal ? nlohmann::json(*result.signal) : nlohmann::json(nullptr)},
         {"timed_out", result.timed_out},
         {"cancelled", result.cancelled},
         {"wall_time_ms", std::chrono::duration<double, std::milli>(result.wall_time).count()},
         {"stdout", result.standard_output},
         {"stderr", result.standard_error}};
  auto& hits = out["limits_hit"] = nlohmann::json::array();
  for (LimitKind kind : result.limits_hit) hits.push_back(to_string(kind));
  auto& limits = out["limits"] = nlohmann::json::array();
  for (const LimitStatus& status : result.limits)
    limits.push_back({{"kind", to_string(status.kind)},
                      {"enforced", status.enforced},
                      {"mechanism", status.mechanism},
                      {"note", status.note}});
}

}  // namespace cuda_agent
