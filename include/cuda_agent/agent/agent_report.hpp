// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Reports of an episode: `report.json` (the whole `EpisodeResult`, for programs) and
/// `report.md` (for people: outcome, best candidate with speedups and verdicts, every
/// trusted evaluation, cost, where the files are).

#include <filesystem>   // path, create_directories
#include <fstream>      // ofstream
#include <stdexcept>    // runtime_error
#include <string>       // string
#include <string_view>  // string_view

#include <nlohmann/json.hpp>

#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/agent/detail/candidate_files.hpp"
#include "cuda_agent/detail/text_format.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

namespace detail {
[[nodiscard]] inline std::string markdown_cell(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '|') c = ' ';
  return text.size() > 120 ? text.substr(0, 117) + "..." : text;
}

inline void write_text_file(const std::filesystem::path& path, std::string_view text) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!stream) throw std::runtime_error("cannot write " + path.string());
}
}  // namespace detail

/// The JSON report: the episode result plus the task and backend it ran with.
[[nodiscard]] inline nlohmann::json episode_report_json(const EpisodeResult& result, const Task& task,
                                                        std::string_view llm) {
  nlohmann::json report = result;
  report["task"] = {{"name", task.name}, {"hash", task.content_hash()}};
  report["llm"] = llm;
  return report;
}

/// The Markdown report.
[[nodiscard]] inline std::string episode_report_markdown(const EpisodeResult& result, const Task& task,
                                                         std::string_view llm) {
  std::string text = "# cuda-agent: " + task.name + "\n\n";
  text += "| | |\n| --- | --- |\n";
  text += "| model | " + detail::markdown_cell(std::string(llm)) + " |\n";
  text +=
      "| outcome | " + std::string(to_string(result.reason)) + ": " + detail::markdown_cell(result.message) + " |\n";
  text += "| turns | " + std::to_string(result.turns) + " |\n";
  text += "| tokens | " + std::to_string(result.usage.prompt_tokens) + " prompt, " +
          std::to_string(result.usage.completion_tokens) + " completion |\n";
  if (result.usage.cost_usd) text += "| cost | $" + detail::format("%.4f", *result.usage.cost_usd) + " |\n";
  text += "| elapsed | " + detail::format("%.1f", result.elapsed.count()) + " s |\n";
  text += "| trajectory | `" + result.trajectory.string() + "` |\n";
  if (result.resumed) text += "| resumed | yes, from an interrupted run |\n";

  text += "\n## Best candidate\n\n";
  if (!result.best) {
    text += "No candidate was scored by the trusted evaluation.\n";
  } else {
    const ScoredCandidate& best = *result.best;
    text += "Reward **" + detail::format("%g", best.reward.value) + "** (" + best.reward.label + ")";
    if (!best.reward.explanation.empty()) text += ": " + best.reward.explanation;
    text += "\n\nScored after turn " + std::to_string(best.turn) + "; files in `" + result.best_directory.string() +
            "` (hash `" + best.hash.substr(0, 16) + "`):\n\n";
    for (const auto& file : detail::candidate_files(result.best_directory))
      text += "- `" + file.generic_string() + "`\n";
    const Evaluation& evaluation = best.evaluation;
    if (const auto rejection = evaluation.rejection())
      text += "\nRejected (" + std::string(to_string(rejection->reason)) + "): " + rejection->message + "\n";
    if (evaluation.verification)
      text += "\nVerification: " + std::string(evaluation.verification->correct ? "correct" : "incorrect") + ", " +
              std::to_string(evaluation.verification->checks_passed) + "/" +
              std::to_string(evaluation.verification->checks_total) + " checks passed.\n";
    if (evaluation.profile) {
      const ProfileResult& profile = *evaluation.profile;
      if (!profile.timings.empty()) {
        text += "\nTimings (" + std::string(to_string(profile.regime)) + "):\n\n";
        text += "| contender | median µs | q1 µs | q3 µs | samples |\n| --- | ---: | ---: | ---: | ---: |\n";
      }
      for (const TimingStats& stats : profile.timings)
        text += "| " + stats.contender + " | " + detail::format("%.2f", stats.median_us) + " | " +
                detail::format("%.2f", stats.q1_us) + " | " + detail::format("%.2f", stats.q3_us) + " | " +
                std::to_string(stats.samples) + " |\n";
      text += "\n| versus | speedup | interval | verdict |\n| --- | ---: | --- | --- |\n";
      for (const char* baseline : {"eager", "compile"})
        if (const auto estimate = speedup_over(evaluation, baseline))
          text += std::string("| ") + baseline + " | " + detail::format("%.3fx", estimate->speedup) + " | [" +
                  detail::format("%.3f", estimate->interval_low) + ", " +
                  detail::format("%.3f", estimate->interval_high) + "] | " + std::string(to_string(estimate->verdict)) +
                  " |\n";
    }
  }

  text += "\n## Trusted evaluations\n\n";
  if (result.evaluations.empty()) {
    text += "None.\n";
  } else {
    text += "| turn | files | reward | label | vs eager | vs compile |\n| ---: | --- | ---: | --- | ---: | ---: |\n";
    for (const ScoredCandidate& candidate : result.evaluations) {
      auto speed = [&](const char* baseline) {
        const auto estimate = speedup_over(candidate.evaluation, baseline);
        return estimate ? detail::format("%.3fx", estimate->speedup) : std::string("-");
      };
      text += "| " + std::to_string(candidate.turn) + " | `" + candidate.hash.substr(0, 12) + "` | " +
              detail::format("%g", candidate.reward.value) + " | " + detail::markdown_cell(candidate.reward.label) +
              " | " + speed("eager") + " | " + speed("compile") + " |\n";
    }
  }
  return text;
}

/// Writes `report.json` and `report.md` into `directory`.
inline void write_episode_reports(const EpisodeResult& result, const Task& task, std::string_view llm,
                                  const std::filesystem::path& directory) {
  std::filesystem::create_directories(directory);
  detail::write_text_file(directory / "report.json", episode_report_json(result, task, llm).dump(2) + "\n");
  detail::write_text_file(directory / "report.md", episode_report_markdown(result, task, llm));
}

}  // namespace cuda_agent
