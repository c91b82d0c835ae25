// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The text the model reads from the loop itself: the first user message
/// (`default_task_prompt`), the system prompt's default (the workspace's SKILL.md), the
/// Finish tool, the notes on each trusted result, and the loop's own interjections. One
/// place for all of it, so that what the model is told can be read, and changed, at once.

#include <cstddef>      // size_t
#include <cstdio>       // snprintf
#include <filesystem>   // path, is_regular_file
#include <stdexcept>    // invalid_argument
#include <string>       // string, to_string
#include <string_view>  // string_view

#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/agent/context_window.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// The task as the model first reads it: what to optimize, where, and how it is judged.
[[nodiscard]] inline std::string default_task_prompt(const Task& task, const std::filesystem::path& workspace) {
  std::string text = "Task: " + task.name + "\n\n";
  text += "Your workspace is " + workspace.string() +
          " (the working directory of every command). The reference implementation is model.py "
          "(read-only):\n\n```python\n" +
          task.reference_source + (task.reference_source.ends_with('\n') ? "" : "\n") + "```\n\n";
  text +=
      "Write CUDA kernels under kernels/ and a ModelNew that uses them in model_new.py, as SKILL.md describes. "
      "Compile, verify and profile as often as you like. Whenever you have verified a change, a trusted "
      "evaluation scores your candidate in a clean copy, and once more at the end; the best trusted result "
      "is your answer. When you are done, call Finish, or reply without calling a tool.";
  return text;
}

namespace detail {

/// The system prompt when `AgentOptions::system_prompt` is unset.
[[nodiscard]] inline std::string read_skill(const std::filesystem::path& workspace) {
  const std::filesystem::path skill = workspace / "SKILL.md";
  if (!std::filesystem::is_regular_file(skill))
    throw std::invalid_argument("the workspace " + workspace.string() +
                                " has no SKILL.md: materialize the workspace first, or set "
                                "AgentOptions::system_prompt");
  return detail::read_file(skill);
}

/// The tool through which the model declares that it is done.
[[nodiscard]] inline ToolSpec finish_tool_spec() {
  return {"Finish",
          "Declare that you are done with the task. Call it once your best candidate is in model_new.py and "
          "kernels/. The answer that counts is the best candidate the trusted evaluation scored during the "
          "episode, so a later, worse edit does not lose an earlier, better result.",
          {{"type", "object"},
           {"properties", {{"summary", {{"type", "string"}, {"description", "What you did and what you found."}}}}},
           {"additionalProperties", false}}};
}

/// The answer to the Finish call.
inline constexpr std::string_view finish_answer =
    "Finishing. The best candidate scored by the trusted evaluation is the answer.";

/// Told when an answer was cut off by the output limit without a tool call, so that the
/// model continues rather than starts again.
inline constexpr std::string_view output_cut_off_note =
    "Your answer was cut off by the output limit. Continue where you stopped; keep tool calls short enough to fit.";

/// Appended to a failing call's answer one failure before the stuck limit ends the episode.
[[nodiscard]] inline std::string stuck_warning(std::size_t failures) {
  return "\n\n[This exact call has now failed " + std::to_string(failures) +
         " times in a row. Another identical failure ends the episode: change your approach.]";
}

/// The note on one trusted result (and the best so far) that the model reads after a turn.
[[nodiscard]] inline std::string describe_evaluation(const ScoredCandidate& candidate, const ScoredCandidate& best,
                                                     bool is_best) {
  char number[64];
  std::snprintf(number, sizeof number, "%g", candidate.reward.value);
  std::string text = "[Trusted evaluation of your candidate as of turn " + std::to_string(candidate.turn) + " (files " +
                     candidate.hash.substr(0, 12) + "): reward " + number + " (" + candidate.reward.label + ")";
  if (!candidate.reward.explanation.empty()) text += ": " + candidate.reward.explanation;
  text += ".";
  const Evaluation& evaluation = candidate.evaluation;
  if (const auto rejection = evaluation.rejection()) {
    text += " Rejected (" + std::string(to_string(rejection->reason)) +
            "): " + cap_observation(rejection->message, 600) + ".";
  }
  for (const char* baseline : {"eager", "compile"}) {
    if (const auto estimate = speedup_over(evaluation, baseline)) {
      std::snprintf(number, sizeof number, " %.2fx vs %s [%.2f, %.2f] %s.", estimate->speedup, baseline,
                    estimate->interval_low, estimate->interval_high, std::string(to_string(estimate->verdict)).c_str());
      text += number;
    }
  }
  if (is_best) {
    text += " This is the best result so far.";
  } else {
    std::snprintf(number, sizeof number, "%g", best.reward.value);
    text += " The best so far remains turn " + std::to_string(best.turn) + " (files " + best.hash.substr(0, 12) +
            ", reward " + number + ").";
  }
  return text + "]";
}

}  // namespace detail

}  // namespace cuda_agent
