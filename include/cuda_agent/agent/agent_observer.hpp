// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Watching an episode: `AgentObserver` is called at turn start and end, around each
/// tool call, after each trusted evaluation and compaction, and at the finish.
/// `CallbackObserver` takes lambdas; `TerminalProgress` shows a status line (turn, best
/// reward, best speedup, elapsed time, tokens) that becomes plain lines when its stream is
/// not a terminal.

#include <chrono>       // steady_clock
#include <cstdint>      // int64_t
#include <cstdio>       // snprintf, fileno, stdout, stderr
#include <functional>   // function
#include <iostream>     // ostream, cout, cerr
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view

#include <unistd.h>  // isatty

#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/tool.hpp"

namespace cuda_agent {

/// Where an episode stands; given to observers at every turn boundary.
struct EpisodeProgress {
  int turn = 0;
  int max_turns = 0;
  Usage usage;
  double elapsed_s = 0;
  /// The prompt size the loop estimates for its next request, and the window's size.
  std::int64_t context_tokens = 0;
  std::int64_t context_window = 0;
  const ScoredCandidate* best = nullptr;
};

/// Receives the events of an episode, on the thread that runs it. Every method has an
/// empty default: override what you need. Observers must not throw.
class AgentObserver {
 public:
  virtual ~AgentObserver() = default;
  virtual void on_turn_start(const EpisodeProgress& /*progress*/) {}
  /// After the model answered and every tool call of the turn was answered.
  virtual void on_turn_end(const EpisodeProgress& /*progress*/, const ChatResponse& /*response*/) {}
  virtual void on_tool_start(int /*turn*/, const ToolCall& /*call*/) {}
  virtual void on_tool_call(int /*turn*/, const ToolCall& /*call*/, const ToolResult& /*result*/,
                            double /*duration_ms*/) {}
  virtual void on_evaluation(const ScoredCandidate& /*candidate*/, bool /*is_new_best*/) {}
  virtual void on_compaction(int /*turn*/, std::int64_t /*tokens_before*/, std::int64_t /*tokens_after*/) {}
  virtual void on_finish(const EpisodeResult& /*result*/) {}
};

/// An observer made of optional callbacks, for hosts that prefer lambdas.
struct CallbackObserver final : AgentObserver {
  std::function<void(const EpisodeProgress&)> turn_start;
  std::function<void(const EpisodeProgress&, const ChatResponse&)> turn_end;
  std::function<void(int, const ToolCall&)> tool_start;
  std::function<void(int, const ToolCall&, const ToolResult&, double)> tool_call;
  std::function<void(const ScoredCandidate&, bool)> evaluation;
  std::function<void(int, std::int64_t, std::int64_t)> compaction;
  std::function<void(const EpisodeResult&)> finish;

  void on_turn_start(const EpisodeProgress& progress) override {
    if (turn_start) turn_start(progress);
  }
  void on_turn_end(const EpisodeProgress& progress, const ChatResponse& response) override {
    if (turn_end) turn_end(progress, response);
  }
  void on_tool_start(int turn, const ToolCall& call) override {
    if (tool_start) tool_start(turn, call);
  }
  void on_tool_call(int turn, const ToolCall& call, const ToolResult& result, double duration_ms) override {
    if (tool_call) tool_call(turn, call, result, duration_ms);
  }
  void on_evaluation(const ScoredCandidate& candidate, bool is_new_best) override {
    if (evaluation) evaluation(candidate, is_new_best);
  }
  void on_compaction(int turn, std::int64_t before, std::int64_t after) override {
    if (compaction) compaction(turn, before, after);
  }
  void on_finish(const EpisodeResult& result) override {
    if (finish) finish(result);
  }
};

namespace detail {
[[nodiscard]] inline std::string format_duration(double seconds) {
  const auto total = static_cast<long long>(seconds);
  char buffer[32];
  if (total >= 3600)
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", total / 3600, total / 60 % 60);
  else if (total >= 60)
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", total / 60, total % 60);
  else
    std::snprintf(buffer, sizeof buffer, "%.1fs", seconds);
  return buffer;
}

[[nodiscard]] inline std::string format_count(std::int64_t count) {
  char buffer[32];
  if (count >= 1'000'000)
    std::snprintf(buffer, sizeof buffer, "%.1fM", static_cast<double>(count) / 1e6);
  else if (count >= 10'000)
    std::snprintf(buffer, sizeof buffer, "%.0fk", static_cast<double>(count) / 1e3);
  else
    std::snprintf(buffer, sizeof buffer, "%lld", static_cast<long long>(count));
  return buffer;
}

/// "reward 3 (1.84x eager, 1.21x compile)" or "no trusted result yet".
[[nodiscard]] inline std::string describe_best(const ScoredCandidate* best) {
  if (best == nullptr) return "best: none yet";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "best reward %g", best->reward.value);
  std::string text = buffer;
  std::string speeds;
  for (const char* baseline : {"eager", "compile"}) {
    if (const auto estimate = speedup_over(best->evaluation, baseline)) {
      std::snprintf(buffer, sizeof buffer, "%.2fx %s", estimate->speedup, baseline);
      speeds += (speeds.empty() ? "" : ", ") + std::string(buffer);
    }
  }
  if (!speeds.empty()) text += " (" + speeds + ")";
  return text;
}
}  // namespace detail

/// Shows an episode's progress. On a terminal one status line is redrawn in place and
/// tool calls flash by on it; elsewhere (a log file, CI) each turn, evaluation and the
/// finish are written as plain lines.
class TerminalProgress final : public AgentObserver {
 public:
  /// `interactive` unset: decided by whether `out` (std::cout or std::cerr) is a terminal.
  explicit TerminalProgress(std::ostream& out = std::cerr, std::optional<bool> interactive = std::nullopt)
      : out_(out), interactive_(interactive.value_or(is_terminal(out))) {}

  [[nodiscard]] bool interactive() const noexcept { return interactive_; }

  void on_turn_start(const EpisodeProgress& progress) override {
    last_ = progress;
    if (interactive_) redraw("thinking...");
  }

  void on_tool_start(int /*turn*/, const ToolCall& call) override {
    if (interactive_) redraw("running " + call.name + " " + argument_hint(call));
  }

  void on_turn_end(const EpisodeProgress& progress, const ChatResponse& response) override {
    last_ = progress;
    if (interactive_) {
      redraw("");
      return;
    }
    std::string calls;
    for (const ToolCall& call : response.message.tool_calls) calls += (calls.empty() ? "" : ", ") + call.name;
    out_ << status_text(progress) << (calls.empty() ? "" : " | " + calls) << '\n' << std::flush;
  }

  void on_evaluation(const ScoredCandidate& candidate, bool is_new_best) override {
    char reward[32];
    std::snprintf(reward, sizeof reward, "%g", candidate.reward.value);
    print_line("turn " + std::to_string(candidate.turn) + ": trusted evaluation: reward " + reward + " (" +
               candidate.reward.label + ")" + (is_new_best ? ", new best" : ""));
  }

  void on_compaction(int turn, std::int64_t before, std::int64_t after) override {
    print_line("turn " + std::to_string(turn) + ": context compacted from ~" + detail::format_count(before) + " to ~" +
               detail::format_count(after) + " tokens");
  }

  void on_finish(const EpisodeResult& result) override {
    if (interactive_) out_ << "\r\x1b[2K";
    out_ << "finished (" << to_string(result.reason) << ") after " << result.turns << " turns, "
         << detail::format_duration(result.elapsed.count()) << ", " << detail::format_count(result.usage.total_tokens())
         << " tokens: " << detail::describe_best(result.best ? &*result.best : nullptr) << '\n'
         << std::flush;
  }

 private:
  static bool is_terminal(const std::ostream& out) {
    if (&out == &std::cout) return ::isatty(STDOUT_FILENO) == 1;
    if (&out == &std::cerr || &out == &std::clog) return ::isatty(STDERR_FILENO) == 1;
    return false;
  }

  static std::string argument_hint(const ToolCall& call) {
    for (const char* key : {"command", "file_path", "path", "pattern"}) {
      if (const auto found = call.arguments.find(key); found != call.arguments.end() && found->is_string()) {
        std::string hint = found->get<std::string>();
        if (const auto newline = hint.find('\n'); newline != std::string::npos) hint = hint.substr(0, newline) + " ...";
        return hint.size() > 60 ? hint.substr(0, 57) + "..." : hint;
      }
    }
    return {};
  }

  static std::string status_text(const EpisodeProgress& progress) {
    std::string text = "turn " + std::to_string(progress.turn);
    if (progress.max_turns > 0) text += "/" + std::to_string(progress.max_turns);
    text += " | " + detail::describe_best(progress.best);
    text += " | " + detail::format_duration(progress.elapsed_s);
    text += " | " + detail::format_count(progress.usage.total_tokens()) + " tokens";
    if (progress.usage.cost_usd) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, " | $%.2f", *progress.usage.cost_usd);
      text += buffer;
    }
    return text;
  }

  void redraw(const std::string& activity) {
    std::string line = status_text(last_);
    if (!activity.empty()) line += " | " + activity;
    out_ << "\r\x1b[2K" << line << std::flush;
  }

  void print_line(const std::string& line) {
    if (interactive_) out_ << "\r\x1b[2K";
    out_ << line << '\n';
    if (interactive_) redraw("");
    out_ << std::flush;
  }

  std::ostream& out_;
  bool interactive_;
  EpisodeProgress last_;
};

}  // namespace cuda_agent
