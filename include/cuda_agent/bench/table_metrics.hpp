// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The metrics of a benchmark run: the paper's Table 1 (per level and overall: pass rate,
/// faster-than-eager and faster-than-compile rates, geometric-mean speedups) and
/// KernelBench's `fast_p`, from the scored samples of a run.
///
/// Conventions, stated once so that every report says the same:
/// - A *sample* is one candidate for one task (one generation, or one episode's result).
///   Samples of tasks unfit to be scored (`task_unfit`) are left out of every rate.
/// - *Pass rate*: correct samples over samples.
/// - *Faster rate* against a baseline: samples that are correct and whose verdict against
///   it is FASTER (the whole confidence interval beyond the threshold, as the reward uses)
///   over samples. A point estimate above 1 with an interval that is not is not counted.
/// - *Geometric-mean speedup*, two ways: over *solved* samples (correct and timed: the
///   paper's convention), and over *all* samples with each failure counted as 1x (what a
///   user gets who takes whatever the model produced, falling back to the baseline).
/// - `fast_p` (KernelBench): samples that are correct with a speedup strictly above `p`,
///   over samples; `fast_0` is the pass rate of timed samples.
/// - Costs per task: totals over the run's distinct tasks.

#include <cmath>     // exp, log, isfinite
#include <cstddef>   // size_t
#include <cstdint>   // uint64_t
#include <map>       // map
#include <optional>  // optional
#include <set>       // set
#include <span>      // span
#include <string>    // string
#include <vector>    // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/evaluation.hpp"

namespace cuda_agent {

/// What the metrics need of one scored sample.
struct BenchSample {
  std::string task;
  int level = 0;
  int sample = 0;
  bool correct = false;
  /// False for a task unfit to be scored: the sample counts nowhere.
  bool scored = true;
  std::optional<SpeedupEstimate> versus_eager;
  std::optional<SpeedupEstimate> versus_compile;
  double reward = -1;
  /// Set for a rejected sample.
  std::optional<RejectionReason> rejection;
  std::uint64_t tokens = 0;
  double cost = 0;
  double wall_seconds = 0;
};

/// The `p` of KernelBench's `fast_p` that every report shows.
inline constexpr double fast_p_thresholds[] = {0.0, 0.5, 0.8, 1.0, 1.5, 2.0};

/// One row of Table 1: a level, or the whole run (`level` 0).
struct TableRow {
  int level = 0;
  std::size_t samples = 0;
  std::size_t tasks = 0;
  std::size_t correct = 0;
  double pass_rate = 0;
  double faster_than_eager_rate = 0;
  double faster_than_compile_rate = 0;
  /// Over solved samples; empty when none was solved and timed.
  std::optional<double> geomean_speedup_eager_solved;
  std::optional<double> geomean_speedup_compile_solved;
  /// Over all samples, failures as 1x; empty when there are no samples.
  std::optional<double> geomean_speedup_eager_all;
  std::optional<double> geomean_speedup_compile_all;
  /// `fast_p` against each baseline, by `p`.
  std::map<double, double> fast_p_eager;
  std::map<double, double> fast_p_compile;
  /// How many samples got each reward value.
  std::map<double, std::size_t> rewards;
  /// Rejected samples by reason.
  std::map<std::string, std::size_t> rejections;
  double tokens_per_task = 0;
  double cost_per_task = 0;
  double wall_seconds_per_task = 0;
};

namespace detail {

[[nodiscard]] inline bool is_faster(const std::optional<SpeedupEstimate>& estimate) {
  return estimate && estimate->verdict == Verdict::faster;
}

/// The speedup of a correct sample against a baseline, where it was timed.
[[nodiscard]] inline std::optional<double> solved_speedup(const BenchSample& sample,
                                                          const std::optional<SpeedupEstimate> BenchSample::*baseline) {
  const std::optional<SpeedupEstimate>& estimate = sample.*baseline;
  if (!sample.correct || !estimate || !(estimate->speedup > 0) || !std::isfinite(estimate->speedup))
    return std::nullopt;
  return estimate->speedup;
}

/// Geometric means over solved samples and over all (failures as 1x).
inline void geomeans(const std::vector<const BenchSample*>& samples,
                     const std::optional<SpeedupEstimate> BenchSample::*baseline, std::optional<double>& solved,
                     std::optional<double>& all, std::map<double, double>& fast_p) {
  double solved_log_sum = 0;
  double all_log_sum = 0;
  std::size_t solved_count = 0;
  for (double p : fast_p_thresholds) fast_p[p] = 0;
  for (const BenchSample* sample : samples) {
    const std::optional<double> speedup = solved_speedup(*sample, baseline);
    if (!speedup) continue;
    solved_log_sum += std::log(*speedup);
    all_log_sum += std::log(*speedup);
    ++solved_count;
    for (double p : fast_p_thresholds)
      if (*speedup > p) fast_p[p] += 1;
  }
  if (solved_count > 0) solved = std::exp(solved_log_sum / static_cast<double>(solved_count));
  if (!samples.empty()) all = std::exp(all_log_sum / static_cast<double>(samples.size()));
  for (auto& [p, count] : fast_p) count = samples.empty() ? 0 : count / static_cast<double>(samples.size());
}

}  // namespace detail

/// The row of the samples of `level` (0: all of them).
[[nodiscard]] inline TableRow summarize_level(std::span<const BenchSample> samples, int level) {
  TableRow row;
  row.level = level;
  std::vector<const BenchSample*> counted;
  std::set<std::string> tasks;
  std::uint64_t tokens = 0;
  double cost = 0;
  double wall = 0;
  for (const BenchSample& sample : samples) {
    if (level != 0 && sample.level != level) continue;
    tasks.insert(sample.task);
    tokens += sample.tokens;
    cost += sample.cost;
    wall += sample.wall_seconds;
    if (!sample.scored) continue;
    counted.push_back(&sample);
    row.rewards[sample.reward] += 1;
    if (sample.rejection) row.rejections[std::string(to_string(*sample.rejection))] += 1;
    if (!sample.correct) continue;
    ++row.correct;
    if (detail::is_faster(sample.versus_eager)) row.faster_than_eager_rate += 1;
    if (detail::is_faster(sample.versus_compile)) row.faster_than_compile_rate += 1;
  }
  row.samples = counted.size();
  row.tasks = tasks.size();
  if (row.samples > 0) {
    const double total = static_cast<double>(row.samples);
    row.pass_rate = static_cast<double>(row.correct) / total;
    row.faster_than_eager_rate /= total;
    row.faster_than_compile_rate /= total;
  }
  detail::geomeans(counted, &BenchSample::versus_eager, row.geomean_speedup_eager_solved, row.geomean_speedup_eager_all,
                   row.fast_p_eager);
  detail::geomeans(counted, &BenchSample::versus_compile, row.geomean_speedup_compile_solved,
                   row.geomean_speedup_compile_all, row.fast_p_compile);
  if (!tasks.empty()) {
    const double task_count = static_cast<double>(tasks.size());
    row.tokens_per_task = static_cast<double>(tokens) / task_count;
    row.cost_per_task = cost / task_count;
    row.wall_seconds_per_task = wall / task_count;
  }
  return row;
}

/// Table 1: a row per level present, in order, then the whole run (level 0).
[[nodiscard]] inline std::vector<TableRow> table_one(std::span<const BenchSample> samples) {
  std::set<int> levels;
  for (const BenchSample& sample : samples) levels.insert(sample.level);
  std::vector<TableRow> rows;
  rows.reserve(levels.size() + 1);
  for (int level : levels) rows.push_back(summarize_level(samples, level));
  rows.push_back(summarize_level(samples, 0));
  return rows;
}

inline void to_json(nlohmann::json& out, const TableRow& row) {
  const auto optional = [](const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  // Keys as a reader writes the numbers: "0.5", "1", "-1".
  const auto keyed = [](const auto& values) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [number, value] : values) {
      std::string key = std::to_string(number);
      key.erase(key.find_last_not_of('0') + 1);
      if (key.back() == '.') key.pop_back();
      object[key] = value;
    }
    return object;
  };
  out = {{"level", row.level == 0 ? nlohmann::json("all") : nlohmann::json(row.level)},
         {"samples", row.samples},
         {"tasks", row.tasks},
         {"correct", row.correct},
         {"pass_rate", row.pass_rate},
         {"faster_than_eager_rate", row.faster_than_eager_rate},
         {"faster_than_compile_rate", row.faster_than_compile_rate},
         {"geomean_speedup",
          {{"eager",
            {{"solved", optional(row.geomean_speedup_eager_solved)},
             {"all_failures_as_1x", optional(row.geomean_speedup_eager_all)}}},
           {"compile",
            {{"solved", optional(row.geomean_speedup_compile_solved)},
             {"all_failures_as_1x", optional(row.geomean_speedup_compile_all)}}}}},
         {"fast_p", {{"eager", keyed(row.fast_p_eager)}, {"compile", keyed(row.fast_p_compile)}}},
         {"rewards", keyed(row.rewards)},
         {"rejections", row.rejections},
         {"per_task",
          {{"tokens", row.tokens_per_task}, {"cost", row.cost_per_task}, {"wall_seconds", row.wall_seconds_per_task}}}};
}

}  // namespace cuda_agent
