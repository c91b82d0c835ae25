// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What an agent episode produces: every candidate the trusted evaluator scored, the best
/// of them (by reward, then speedup), why the episode stopped, and what it cost.

#include <chrono>       // duration
#include <filesystem>   // path
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent {

/// Why an episode ended.
enum class StopReason {
  completed,          ///< the model declared completion or stopped calling tools
  turn_limit,         ///< the turn budget ran out
  time_limit,         ///< the wall-time budget ran out
  cost_limit,         ///< the money budget ran out
  token_limit,        ///< the total-token budget ran out
  context_exhausted,  ///< the prompt no longer fits the context window and cannot shrink
  stuck,              ///< the model kept repeating the same failing action
  cancelled,          ///< the host asked the episode to stop
  llm_error,          ///< the model backend failed in a way retrying cannot fix
};

[[nodiscard]] constexpr std::string_view to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::completed:
      return "completed";
    case StopReason::turn_limit:
      return "turn_limit";
    case StopReason::time_limit:
      return "time_limit";
    case StopReason::cost_limit:
      return "cost_limit";
    case StopReason::token_limit:
      return "token_limit";
    case StopReason::context_exhausted:
      return "context_exhausted";
    case StopReason::stuck:
      return "stuck";
    case StopReason::cancelled:
      return "cancelled";
    case StopReason::llm_error:
      return "llm_error";
  }
  return "llm_error";
}

[[nodiscard]] inline std::optional<StopReason> parse_stop_reason(std::string_view text) noexcept {
  for (StopReason reason : {StopReason::completed, StopReason::turn_limit, StopReason::time_limit,
                            StopReason::cost_limit, StopReason::token_limit, StopReason::context_exhausted,
                            StopReason::stuck, StopReason::cancelled, StopReason::llm_error})
    if (to_string(reason) == text) return reason;
  return std::nullopt;
}

/// The speedup a candidate earned over `baseline` ("eager" or "compile"), if it was timed.
[[nodiscard]] inline std::optional<SpeedupEstimate> speedup_over(const Evaluation& evaluation,
                                                                 std::string_view baseline) {
  if (!evaluation.profile) return std::nullopt;
  return baseline == "compile" ? evaluation.profile->versus_compile : evaluation.profile->versus_eager;
}

/// One candidate the trusted evaluator scored during an episode.
struct ScoredCandidate {
  /// The turn after which it was scored.
  int turn = 0;
  /// Content hash of its files (see `detail::candidate_hash`).
  std::string hash;
  /// Where the snapshot of its files lies.
  std::filesystem::path directory;
  Evaluation evaluation;
  Reward reward;

  /// The number that breaks ties between equal rewards: the speedup over compile where
  /// it was measured, else over eager, else 0.
  [[nodiscard]] double ranking_speedup() const {
    if (const auto compile = speedup_over(evaluation, "compile")) return compile->speedup;
    if (const auto eager = speedup_over(evaluation, "eager")) return eager->speedup;
    return 0.0;
  }

  /// Higher reward wins; equal rewards go to the faster candidate.
  [[nodiscard]] bool better_than(const ScoredCandidate& other) const {
    if (reward.value != other.reward.value) return reward.value > other.reward.value;
    return ranking_speedup() > other.ranking_speedup();
  }
};

/// The whole outcome of an episode.
struct EpisodeResult {
  StopReason reason = StopReason::completed;
  /// Says in words why the episode stopped and what to do about it, where anything can be done.
  std::string message;
  /// Model answers received.
  int turns = 0;
  Usage usage;
  std::chrono::duration<double> elapsed{0};
  /// Every trusted evaluation, in order.
  std::vector<ScoredCandidate> evaluations;
  /// The best of `evaluations`; this is the episode's answer, not the last one.
  std::optional<ScoredCandidate> best;
  /// Where the best candidate's files were written (empty if none was scored).
  std::filesystem::path best_directory;
  std::filesystem::path trajectory;
  std::filesystem::path output_directory;
  /// The episode continued a trajectory left by an earlier, interrupted run.
  bool resumed = false;
};

inline void to_json(nlohmann::json& out, const ScoredCandidate& candidate) {
  out = {{"turn", candidate.turn},
         {"hash", candidate.hash},
         {"directory", candidate.directory.string()},
         {"evaluation", candidate.evaluation},
         {"reward", candidate.reward}};
}

inline void from_json(const nlohmann::json& in, ScoredCandidate& candidate) {
  candidate.turn = in.value("turn", 0);
  candidate.hash = in.value("hash", "");
  candidate.directory = in.value("directory", "");
  candidate.evaluation = in.value("evaluation", Evaluation{});
  candidate.reward = in.value("reward", Reward{});
}

/// The short account of a scored candidate used in trajectories and reports.
[[nodiscard]] inline nlohmann::json summary_json(const ScoredCandidate& candidate) {
  nlohmann::json summary = {{"turn", candidate.turn},
                            {"candidate_hash", candidate.hash},
                            {"directory", candidate.directory.string()},
                            {"reward", candidate.reward.value},
                            {"label", candidate.reward.label}};
  for (const char* baseline : {"eager", "compile"})
    if (const auto estimate = speedup_over(candidate.evaluation, baseline))
      summary[std::string("speedup_vs_") + baseline] = estimate->speedup;
  return summary;
}

inline void to_json(nlohmann::json& out, const EpisodeResult& result) {
  out = {{"reason", to_string(result.reason)},
         {"message", result.message},
         {"turns", result.turns},
         {"usage", result.usage},
         {"elapsed_s", result.elapsed.count()},
         {"evaluations", result.evaluations},
         {"best", result.best ? nlohmann::json(*result.best) : nlohmann::json(nullptr)},
         {"best_directory", result.best_directory.string()},
         {"trajectory", result.trajectory.string()},
         {"output_directory", result.output_directory.string()},
         {"resumed", result.resumed}};
}

}  // namespace cuda_agent
