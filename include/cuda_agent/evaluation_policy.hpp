// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `EvaluationPolicy`: what one request may choose of its trusted evaluation over the
/// settings its evaluator was made with: the tolerance profile values are judged by, the
/// library policy the build, the link check and the source checks apply, and the budget of
/// the timing. A field left empty keeps the evaluator's own. One evaluator (and its warm
/// workers) thus serves requests that chose differently: the evaluation service
/// (service/evaluation_service.hpp) fills in its defaults and checks what a request may
/// ask, and an evaluation pool hands the result to its evaluators with each candidate, on
/// its own slots and on remote workers alike, as the JSON below.

#include <optional>     // optional
#include <stdexcept>    // invalid_argument
#include <string>       // string
#include <string_view>  // string_view

#include <nlohmann/json.hpp>

#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/tolerance.hpp"

namespace cuda_agent {

struct EvaluationPolicy {
  /// A tolerance profile by name (`tolerance_profile`).
  std::optional<std::string> tolerance;
  /// What the candidate may link and call. The compile driver's own allowance still
  /// bounds what a build links.
  std::optional<LibraryPolicy> libraries;
  /// Seconds of interleaved timing rounds, and rounds at most (the profiler's
  /// `TimingBudget::seconds` and `max_rounds`).
  std::optional<double> timing_seconds;
  std::optional<int> timing_max_rounds;

  friend bool operator==(const EvaluationPolicy&, const EvaluationPolicy&) = default;
};

/// {"tolerance": "strict", "libraries": {...}, "timing_budget": {"seconds": 1.5,
/// "max_rounds": 100}}, each part only when set.
inline void to_json(nlohmann::json& out, const EvaluationPolicy& policy) {
  out = nlohmann::json::object();
  if (policy.tolerance) out["tolerance"] = *policy.tolerance;
  if (policy.libraries) out["libraries"] = *policy.libraries;
  if (policy.timing_seconds) out["timing_budget"]["seconds"] = *policy.timing_seconds;
  if (policy.timing_max_rounds) out["timing_budget"]["max_rounds"] = *policy.timing_max_rounds;
}

/// Reads the form `to_json` writes; keys it does not name (a service's "reward", "timing",
/// "device") are the host's and left alone. Throws std::invalid_argument naming the field
/// for a value no evaluator could apply: an unknown tolerance profile, a budget of no time
/// or no rounds, a value of the wrong type.
inline void from_json(const nlohmann::json& in, EvaluationPolicy& policy) {
  if (!in.is_object()) throw std::invalid_argument("policy: expects a JSON object");
  policy = EvaluationPolicy{};
  try {
    if (const auto tolerance = in.find("tolerance"); tolerance != in.end()) {
      policy.tolerance = tolerance->get<std::string>();
      if (!tolerance_profile(*policy.tolerance))
        throw std::invalid_argument("policy.tolerance: no tolerance profile is named '" + *policy.tolerance + "' (" +
                                    std::string(tolerance_profile_names) + ")");
    }
    if (const auto libraries = in.find("libraries"); libraries != in.end()) {
      if (!libraries->is_object()) throw std::invalid_argument("policy.libraries: expects a JSON object");
      policy.libraries = libraries->get<LibraryPolicy>();
    }
    if (const auto budget = in.find("timing_budget"); budget != in.end()) {
      if (!budget->is_object()) throw std::invalid_argument("policy.timing_budget: expects a JSON object");
      if (const auto seconds = budget->find("seconds"); seconds != budget->end()) {
        policy.timing_seconds = seconds->get<double>();
        if (!(*policy.timing_seconds > 0))
          throw std::invalid_argument("policy.timing_budget.seconds: expects a positive number of seconds");
      }
      if (const auto rounds = budget->find("max_rounds"); rounds != budget->end()) {
        policy.timing_max_rounds = rounds->get<int>();
        if (*policy.timing_max_rounds < 1)
          throw std::invalid_argument("policy.timing_budget.max_rounds: expects at least one round");
      }
    }
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(std::string("policy: ") + error.what());
  }
}

}  // namespace cuda_agent
