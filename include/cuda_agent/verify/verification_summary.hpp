// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A verification result in words, for a model (the Verify tool) and for people (the
/// `cuda-agent eval` command): the verdict first, then what to fix.

#include <algorithm>  // max, min
#include <cstddef>    // size_t
#include <map>        // map
#include <string>     // string, to_string

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/text_format.hpp"
#include "cuda_agent/evaluation.hpp"

namespace cuda_agent {

/// "CORRECT: ..." or "REJECTED (reason): message", with the static findings and the
/// candidate's own output (capped at `output_limit` bytes) when there are any.
[[nodiscard]] inline std::string describe_verification(const VerificationResult& result,
                                                       std::size_t output_limit = 3000) {
  const nlohmann::json& details = result.details;
  std::string text;
  if (result.correct) {
    double largest = 0;
    if (const auto checks = details.find("checks"); checks != details.end() && checks->is_array())
      for (const nlohmann::json& check : *checks)
        for (const nlohmann::json& error : check.value("errors", nlohmann::json::array()))
          if (error.contains("max_abs_error") && error["max_abs_error"].is_number())
            largest = std::max(largest, error["max_abs_error"].get<double>());
    // How often each set was called: the plan varies it from set to set.
    std::map<int, int> calls_per_set;
    if (const auto plan = details.find("plan"); plan != details.end() && plan->is_array())
      for (const nlohmann::json& step : *plan) ++calls_per_set[step.value("set", 0)];
    // The plan's sets: the request's seeds and the near repeat the reference adds.
    const int sets = std::max(details.contains("seeds") ? static_cast<int>(details["seeds"].size()) : 0,
                              static_cast<int>(calls_per_set.size()));
    int fewest = sets ? result.checks_total / sets : 0, most = fewest;
    if (!calls_per_set.empty()) {
      fewest = most = calls_per_set.begin()->second;
      for (const auto& [set, calls] : calls_per_set) {
        fewest = std::min(fewest, calls);
        most = std::max(most, calls);
      }
    }
    text = "CORRECT: " + std::to_string(result.checks_passed) + " of " + std::to_string(result.checks_total) +
           " checks passed (" + std::to_string(sets) + " input sets from fresh seeds, each run " +
           std::to_string(fewest) + (most != fewest ? " to " + std::to_string(most) : std::string()) +
           " times); largest difference " + detail::format("%.3g", largest);
    if (const auto tolerance = details.find("tolerance"); tolerance != details.end() && tolerance->contains("default"))
      text += " (tolerance atol " + detail::format("%.3g", (*tolerance)["default"].value("atol", 0.0)) + ", rtol " +
              detail::format("%.3g", (*tolerance)["default"].value("rtol", 0.0)) + ")";
    text += ".\n";
  } else if (result.rejection) {
    text = "REJECTED (" + std::string(to_string(result.rejection->reason)) + "): " + result.rejection->message + "\n";
    const nlohmann::json& extra = result.rejection->details;
    if (const auto findings = extra.find("findings");
        findings != extra.end() && findings->is_array() && findings->size() > 1) {
      text += "All findings of the static checks:\n";
      std::size_t shown = 0;
      for (const nlohmann::json& finding : *findings) {
        if (++shown > 12) {
          text += "  (" + std::to_string(findings->size() - 12) + " more)\n";
          break;
        }
        text += "  - " + finding.value("message", std::string()) + "\n";
      }
    }
    if (const auto traceback = extra.find("traceback"); traceback != extra.end() && traceback->is_string())
      text += "Traceback (candidate frames):\n" + traceback->get<std::string>() + "\n";
  } else {
    text = "NOT VERIFIED: no verdict.\n";
  }
  if (const auto output = details.find("candidate_output");
      output != details.end() && output->is_string() && !output->get<std::string>().empty()) {
    std::string printed = output->get<std::string>();
    if (printed.size() > output_limit) printed = "[...]\n" + printed.substr(printed.size() - output_limit);
    text += "What the candidate printed:\n" + printed + (printed.back() == '\n' ? "" : "\n");
  }
  return text;
}

}  // namespace cuda_agent
