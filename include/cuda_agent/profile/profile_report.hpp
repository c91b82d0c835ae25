// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A profile and a reward as text a person or a model reads: the regime and why, each
/// contender's median and spread, each speedup with its interval and verdict, and what
/// the verdict needed.

#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/text_format.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/profile/timing_statistics.hpp"

namespace cuda_agent {

namespace detail {

inline std::string json_text(const nlohmann::json& details, const char* field) {
  const auto found = details.find(field);
  if (found == details.end() || found->is_null()) return {};
  return found->is_string() ? found->get<std::string>() : found->dump();
}

}  // namespace detail

/// One line per speedup: "vs compile  1.48x  [1.44, 1.52]  FASTER  (needs >= 1.053x throughout)".
[[nodiscard]] inline std::string describe_speedup_line(const SpeedupEstimate& estimate) {
  return detail::format("vs %-8s %7.3fx  [%.3f, %.3f]  %-9s (FASTER needs >= %.3fx throughout, SLOWER <= %.3fx)",
                        estimate.baseline.c_str(), estimate.speedup, estimate.interval_low, estimate.interval_high,
                        std::string(to_string(estimate.verdict)).c_str(), faster_bound(estimate.threshold),
                        slower_bound(estimate.threshold));
}

/// The whole profile as a small report.
[[nodiscard]] inline std::string describe_profile(const ProfileResult& profile) {
  const nlohmann::json& details = profile.details;
  std::string text;
  if (profile.rejection) {
    text += "timing rejected the candidate: " + std::string(to_string(profile.rejection->reason)) + ": " +
            profile.rejection->message + "\n";
    if (profile.timings.empty()) return text;
  }
  if (const auto device = details.find("device"); device != details.end() && device->is_object()) {
    const std::string kind = detail::json_text(*device, "kind");
    text += "timed on: " + detail::json_text(*device, "name") + " (" + kind + ", " +
            detail::json_text(*device, "timer") + ")\n";
    // Host-timed CPU runs exercise the protocol; their numbers say nothing about GPU kernels.
    if (kind == "cpu")
      text +=
          "note: CPU timing with host timers (the protocol without a GPU); GPU speedups need --device cuda on a "
          "machine with an NVIDIA GPU\n";
  }
  text += "regime: " + std::string(to_string(profile.regime));
  if (const std::string reason = detail::json_text(details, "regime_reason"); !reason.empty())
    text += " (" + reason + ")";
  text += "\n";
  if (details.contains("rounds"))
    text += detail::format(
        "rounds: %s, %s re-checked, %s throttled; stopped on %s\n", detail::json_text(details, "rounds").c_str(),
        detail::json_text(details, "rechecked_rounds").c_str(), detail::json_text(details, "throttled_rounds").c_str(),
        detail::json_text(details, "stop_reason").c_str());
  text += detail::format("%-10s %12s %25s %8s\n", "contender", "median us", "q1 - q3 us", "samples");
  for (const TimingStats& stats : profile.timings) {
    std::string note;
    if (stats.contender == "compile" && details.contains("compile_timing")) note = "  (from the baseline cache)";
    text += detail::format("%-10s %12.2f %12.2f - %10.2f %8zu", stats.contender.c_str(), stats.median_us, stats.q1_us,
                           stats.q3_us, stats.samples) +
            note + "\n";
  }
  for (const std::optional<SpeedupEstimate>* estimate : {&profile.versus_eager, &profile.versus_compile})
    if (*estimate) text += describe_speedup_line(**estimate) + "\n";
  if (const auto warnings = details.find("warnings"); warnings != details.end() && warnings->is_array())
    for (const nlohmann::json& warning : *warnings)
      text += "warning: " + (warning.is_string() ? warning.get<std::string>() : warning.dump()) + "\n";
  return text;
}

/// "reward 3 (faster_than_compile): ...".
[[nodiscard]] inline std::string describe_reward(const Reward& reward, std::string_view policy = {}) {
  std::string text = detail::format("reward %g", reward.value);
  if (!policy.empty()) text += " [" + std::string(policy) + "]";
  return text + " (" + reward.label + "): " + reward.explanation;
}

}  // namespace cuda_agent
