// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `AgentBudget`: the limits of one episode (turns, wall time, money, tokens), what an
/// answer costs when the backend reports tokens but no price, and which limit, if any,
/// an episode has reached before its next turn.

#include <chrono>    // seconds
#include <cstdint>   // int64_t
#include <optional>  // optional, nullopt
#include <string>    // string, to_string

#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent {

/// Limits of one episode. Unset limits do not apply.
struct AgentBudget {
  /// Model answers; 200 as in the paper's evaluation.
  int max_turns = 200;
  std::optional<std::chrono::seconds> wall_time;
  /// Needs a backend that reports cost, or the prices below.
  std::optional<double> max_cost_usd;
  std::optional<std::int64_t> max_total_tokens;
  /// Prices for backends that report tokens but no cost.
  std::optional<double> usd_per_million_prompt_tokens;
  std::optional<double> usd_per_million_completion_tokens;
};

/// Fills in `usage.cost_usd` from the budget's prices, unless the backend reported a
/// cost (which is then the one that counts) or the budget names no price.
inline void price_usage(const AgentBudget& budget, Usage& usage) {
  if (usage.cost_usd) return;
  if (!budget.usd_per_million_prompt_tokens && !budget.usd_per_million_completion_tokens) return;
  usage.cost_usd =
      (static_cast<double>(usage.prompt_tokens) * budget.usd_per_million_prompt_tokens.value_or(0) +
       static_cast<double>(usage.completion_tokens) * budget.usd_per_million_completion_tokens.value_or(0)) /
      1e6;
}

/// A spent limit: the reason an episode stops, and the sentence that says which limit.
struct SpentBudget {
  StopReason reason;
  std::string message;
};

/// The first limit of `budget` that an episode `turns` answers, `elapsed_s` seconds and
/// `usage` into has reached, in the order turns, wall time, money, tokens.
[[nodiscard]] inline std::optional<SpentBudget> spent_budget(const AgentBudget& budget, int turns, double elapsed_s,
                                                             const Usage& usage) {
  if (turns >= budget.max_turns)
    return SpentBudget{StopReason::turn_limit, "the budget of " + std::to_string(budget.max_turns) + " turns is spent"};
  if (budget.wall_time && elapsed_s >= static_cast<double>(budget.wall_time->count()))
    return SpentBudget{StopReason::time_limit,
                       "the wall-time budget of " + std::to_string(budget.wall_time->count()) + " s is spent"};
  if (budget.max_cost_usd && usage.cost_usd && *usage.cost_usd >= *budget.max_cost_usd)
    return SpentBudget{StopReason::cost_limit,
                       "the money budget of $" + std::to_string(*budget.max_cost_usd) + " is spent"};
  if (budget.max_total_tokens && usage.total_tokens() >= *budget.max_total_tokens)
    return SpentBudget{StopReason::token_limit,
                       "the budget of " + std::to_string(*budget.max_total_tokens) + " tokens is spent"};
  return std::nullopt;
}

}  // namespace cuda_agent
