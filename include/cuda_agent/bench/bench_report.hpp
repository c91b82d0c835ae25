// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The report of a benchmark run, for people to read: Markdown (report.md) and one HTML page
/// (report.html) that needs no network, script or font: its plots are inline SVG. Both show
/// Table 1 per level and overall beside the rows the CUDA Agent paper published, KernelBench's
/// fast_p against eager and torch.compile, the rewards and rejections, the speedups of each
/// level, and the best sample of each task with links to its record (samples/<name>.json)
/// and its laid-out sources (candidates/<name>/). The page adds fast_p curves and the
/// speedups of each level on a log scale.
///
/// The numbers come from table_metrics.hpp over the same samples as results.json, and are
/// written alike in both forms: rates as percentages with one decimal ("62.5%"), speedups
/// with two decimals and an x ("1.87x"), counts and rewards whole; "–" where there is no
/// value (a level without a scored sample, a mean without a solved sample, a sample that was
/// not timed). Every number of the page also carries its exact value in `data-value`, in the
/// shortest form that reads back as the same double (as results.json holds it), beside
/// `data-metric`, `data-level` ("1", "2", ..., "all", as results.json names the levels) and,
/// where they apply, `data-baseline`, `data-p`, `data-reward`, `data-reason`, `data-sample`:
/// a reader or a test finds each number there. Text that comes from files (task names,
/// messages, folders) is escaped for the form it goes into.

#include <algorithm>     // sort, clamp, min, max
#include <charconv>      // to_chars
#include <cmath>         // isfinite, log2, floor, ceil, ldexp
#include <cstddef>       // size_t
#include <iterator>      // size
#include <map>           // map
#include <optional>      // optional
#include <set>           // set
#include <span>          // span
#include <string>        // string, to_string
#include <string_view>   // string_view
#include <system_error>  // errc
#include <tuple>         // tuple
#include <utility>       // pair, move
#include <vector>        // vector

#include "cuda_agent/bench/table_metrics.hpp"
#include "cuda_agent/evaluation.hpp"

namespace cuda_agent {

/// One sample as the report lists it: its metrics, and where its files are.
struct ReportSample {
  BenchSample metrics;
  /// "level_1_problem_19_sample_0": its record is samples/<name>.json.
  std::string name;
  /// Why it was rejected, in the evaluator's words; empty when it was not.
  std::string message;
  /// Whether candidates/<name>/ holds its laid-out sources.
  bool has_candidate = false;
};

/// What a report shows: the scored samples of a run (tasks in the order of their first
/// sample), and where they came from.
struct BenchReport {
  std::vector<ReportSample> samples;
  /// The folder of generations that was scored, as the run was given it.
  std::string generations;
  /// Samples that failed for reasons not their own: counted nowhere, and said so.
  std::size_t unscored = 0;
};

namespace detail::report {

/// What a cell holds where there is no value.
inline constexpr std::string_view no_value = "\u2013";

/// `value` with `decimals` digits after the point, whatever the locale.
[[nodiscard]] inline std::string fixed(double value, int decimals) {
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value, std::chars_format::fixed, decimals);
  if (!std::isfinite(value) || error != std::errc()) return std::string(no_value);
  return std::string(text, end);
}

/// The shortest text that reads back as `value` (as JSON writes it); empty when not finite.
[[nodiscard]] inline std::string exact(double value) {
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  if (!std::isfinite(value) || error != std::errc()) return {};
  return std::string(text, end);
}

[[nodiscard]] inline std::string percent(double share) { return fixed(100 * share, 1) + "%"; }

[[nodiscard]] inline std::string times(const std::optional<double>& speedup) {
  return speedup && std::isfinite(*speedup) ? fixed(*speedup, 2) + "x" : std::string(no_value);
}

[[nodiscard]] inline std::string escape_html(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char character : text) {
    switch (character) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      case '\'':
        escaped += "&#39;";
        break;
      default:
        escaped += character;
    }
  }
  return escaped;
}

/// Text that Markdown shows as it is, inside a table cell too: markup characters are
/// escaped, HTML's are written as entities, line breaks become spaces.
[[nodiscard]] inline std::string escape_markdown(std::string_view text) {
  static constexpr std::string_view marked = "\\`*_[]|#";
  std::string escaped;
  escaped.reserve(text.size());
  for (char character : text) {
    if (character == '\n' || character == '\r' || character == '\t')
      escaped += ' ';
    else if (character == '<')
      escaped += "&lt;";
    else if (character == '>')
      escaped += "&gt;";
    else if (character == '&')
      escaped += "&amp;";
    else if (marked.find(character) != std::string_view::npos)
      escaped += std::string("\\") + character;
    else
      escaped += character;
  }
  return escaped;
}

/// A relative link with every byte outside letters, digits and `-._~/` percent-encoded.
[[nodiscard]] inline std::string encode_link(std::string_view link) {
  static constexpr std::string_view hex = "0123456789ABCDEF";
  std::string encoded;
  for (char character : link) {
    const auto byte = static_cast<unsigned char>(character);
    if ((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || (byte >= '0' && byte <= '9') ||
        std::string_view("-._~/").find(character) != std::string_view::npos)
      encoded += character;
    else
      encoded += std::string{'%', hex[byte >> 4U], hex[byte & 15U]};
  }
  return encoded;
}

/// At most `limit` bytes of `text`, cut before a whole UTF-8 character, with "…" when cut.
[[nodiscard]] inline std::string shortened(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0U) == 0x80U) --end;
  return std::string(text.substr(0, end)) + "\u2026";
}

/// "19_ReLU" of "path/to/level1/19_ReLU.py".
[[nodiscard]] inline std::string task_label(std::string_view task) {
  if (const std::size_t slash = task.find_last_of('/'); slash != std::string_view::npos && slash + 1 < task.size())
    task.remove_prefix(slash + 1);
  if (task.size() > 3 && task.ends_with(".py")) task.remove_suffix(3);
  return std::string(task);
}

/// A level as results.json names it ("1", "all"), and as a row heading ("level 1", "all").
[[nodiscard]] inline std::string level_key(int level) { return level == 0 ? "all" : std::to_string(level); }
[[nodiscard]] inline std::string level_title(int level) {
  return level == 0 ? "all" : "level " + std::to_string(level);
}

// ---------------------------------------------------------------------------------------
// What both forms show, as tables of formatted cells; each form writes them its own way.

/// `data-*` attributes, named without the prefix.
using Attributes = std::vector<std::pair<std::string, std::string>>;

struct Cell {
  std::string text;
  /// Where the text links to (relative to the report), or empty.
  std::string link;
  Attributes data;
};

struct Row {
  /// The first cell heads the row.
  std::vector<Cell> cells;
  Attributes data;
};

struct Table {
  std::string id;
  std::vector<std::string> columns;
  std::vector<Row> rows;
  /// Said instead of a table that has no rows.
  std::string when_empty = "no samples";
};

struct Section {
  std::string id;
  std::string title;
  std::vector<std::string> paragraphs;
  Table table;
  /// The page's plots of this section (inline SVG); the Markdown has its table only.
  std::string plots;
};

/// A number cell: `text` as shown, and the exact value where there is one.
[[nodiscard]] inline Cell number_cell(std::string text, std::optional<double> value, Attributes data) {
  if (value && std::isfinite(*value)) data.emplace_back("value", exact(*value));
  return Cell{std::move(text), {}, std::move(data)};
}

[[nodiscard]] inline Attributes metric_of(std::string_view metric, int level) {
  return {{"metric", std::string(metric)}, {"level", level_key(level)}};
}

// ---------------------------------------------------------------------------------------
// Table 1 beside the paper's.

/// A row of the CUDA Agent paper's Table 1 (arXiv 2602.24286), as published; empty where
/// the paper gives no number.
struct PublishedRow {
  int level = 0;
  std::string_view pass_rate;
  std::string_view faster_than_eager_rate;
  std::string_view faster_than_compile_rate;
  std::string_view geomean_eager;
  std::string_view geomean_compile;
};

inline constexpr PublishedRow cuda_agent_paper_rows[] = {
    {1, "100%", "99%", "97%", "", "1.87x"},
    {2, "100%", "100%", "100%", "", "2.80x"},
    {3, "94%", "94%", "90%", "", "1.52x"},
    {0, "98.8%", "98.4%", "96.8%", "2.60x", "2.11x"},
};

[[nodiscard]] inline Row run_row(const TableRow& row) {
  const auto count = [&](std::string_view metric, std::size_t value) {
    return number_cell(std::to_string(value), static_cast<double>(value), metric_of(metric, row.level));
  };
  // A level without a scored sample has no rates: "–", not 0%.
  const auto rate = [&](std::string_view metric, double value) {
    if (row.samples == 0) return Cell{std::string(no_value), {}, metric_of(metric, row.level)};
    return number_cell(percent(value), value, metric_of(metric, row.level));
  };
  const auto mean = [&](std::string_view metric, const std::optional<double>& value) {
    return number_cell(times(value), value, metric_of(metric, row.level));
  };
  return Row{{Cell{level_title(row.level), {}, {}}, count("samples", row.samples), count("tasks", row.tasks),
              count("correct", row.correct), rate("pass_rate", row.pass_rate),
              rate("faster_than_eager_rate", row.faster_than_eager_rate),
              rate("faster_than_compile_rate", row.faster_than_compile_rate),
              mean("geomean_eager_solved", row.geomean_speedup_eager_solved),
              mean("geomean_eager_all", row.geomean_speedup_eager_all),
              mean("geomean_compile_solved", row.geomean_speedup_compile_solved),
              mean("geomean_compile_all", row.geomean_speedup_compile_all)},
             {{"level", level_key(row.level)}, {"source", "run"}}};
}

[[nodiscard]] inline Row paper_row(const PublishedRow& published) {
  const auto cell = [](std::string_view metric, std::string_view value) {
    return Cell{std::string(value.empty() ? no_value : value), {}, {{"paper", std::string(metric)}}};
  };
  return Row{{Cell{level_title(published.level) + ", CUDA Agent paper", {}, {}}, cell("samples", ""), cell("tasks", ""),
              cell("correct", ""), cell("pass_rate", published.pass_rate),
              cell("faster_than_eager_rate", published.faster_than_eager_rate),
              cell("faster_than_compile_rate", published.faster_than_compile_rate),
              cell("geomean_eager_solved", published.geomean_eager), cell("geomean_eager_all", ""),
              cell("geomean_compile_solved", published.geomean_compile), cell("geomean_compile_all", "")},
             {{"level", level_key(published.level)}, {"source", "paper"}}};
}

[[nodiscard]] inline Section table_one_section(std::span<const TableRow> table) {
  Section section{"table-one", "Table 1", {}, {"table-one-rows", {}, {}}, {}};
  section.paragraphs = {
      "Pass: correct samples over scored samples. >eager, >compile: samples that are correct and whose verdict "
      "against that baseline is FASTER (the whole confidence interval beyond the threshold), over scored samples. "
      "Geometric-mean speedups two ways: solved, over correct timed samples (the paper's convention); all, over "
      "every scored sample with each failure counted as 1x (what a user gets who falls back to the baseline). "
      "Samples of tasks unfit to be scored count nowhere.",
      "The rows marked CUDA Agent paper are the published ones (arXiv 2602.24286: KernelBench's 250 tasks, one "
      "final solution per task), for reference, not a like-for-like comparison: the paper's geometric means are "
      "over correct solutions only (compare the solved columns), its times are a profiler's sum of CUDA kernel "
      "time that leaves out the host's launch overhead, where these time whole calls on this machine against "
      "baselines timed here, and its rates are per task where these are per sample."};
  section.table.columns = {"",
                           "samples",
                           "tasks",
                           "correct",
                           "pass",
                           ">eager",
                           ">compile",
                           "geomean vs eager, solved",
                           "geomean vs eager, all",
                           "geomean vs compile, solved",
                           "geomean vs compile, all"};
  for (const TableRow& row : table) {
    section.table.rows.push_back(run_row(row));
    for (const PublishedRow& published : cuda_agent_paper_rows)
      if (published.level == row.level) section.table.rows.push_back(paper_row(published));
  }
  return section;
}

// ---------------------------------------------------------------------------------------
// fast_p, rewards, rejections.

[[nodiscard]] inline Section fast_p_section(std::span<const TableRow> table) {
  Section section{"fast-p", "fast_p", {}, {"fast-p-rows", {"against", "level"}, {}}, {}};
  section.paragraphs = {
      "KernelBench's fast_p: the share of scored samples that are correct and more than p times as fast as the "
      "baseline; fast_0 is the pass rate of timed samples."};
  for (double p : fast_p_thresholds) section.table.columns.push_back("fast_" + exact(p));
  using Shares = std::map<double, double> TableRow::*;
  for (const auto& [baseline, shares] : {std::pair<std::string, Shares>{"eager", &TableRow::fast_p_eager},
                                         std::pair<std::string, Shares>{"compile", &TableRow::fast_p_compile}}) {
    for (const TableRow& row : table) {
      Row line{{Cell{baseline, {}, {}}, Cell{level_title(row.level), {}, {}}},
               {{"baseline", baseline}, {"level", level_key(row.level)}}};
      for (double p : fast_p_thresholds) {
        Attributes data = metric_of("fast_p", row.level);
        data.emplace_back("baseline", baseline);
        data.emplace_back("p", exact(p));
        const auto share = (row.*shares).find(p);
        if (row.samples == 0 || share == (row.*shares).end())
          line.cells.push_back(Cell{std::string(no_value), {}, std::move(data)});
        else
          line.cells.push_back(number_cell(percent(share->second), share->second, std::move(data)));
      }
      section.table.rows.push_back(std::move(line));
    }
  }
  return section;
}

[[nodiscard]] inline std::string key_text(double key) { return exact(key); }
[[nodiscard]] inline std::string key_text(const std::string& key) { return key; }

/// A row per key of `counts` (a reward, a reason), a column per level: how many scored
/// samples, and their share of the level's.
template <typename Key>
[[nodiscard]] Table count_table(std::span<const TableRow> table, std::map<Key, std::size_t> TableRow::*counts,
                                std::string id, std::string key_title, const std::string& metric,
                                const std::string& key_name) {
  Table result{std::move(id), {std::move(key_title)}, {}, "no samples"};
  std::set<Key> keys;
  for (const TableRow& row : table) {
    result.columns.push_back(level_title(row.level));
    for (const auto& [key, count] : row.*counts) keys.insert(key);
  }
  for (const Key& key : keys) {
    Row line{{Cell{key_text(key), {}, {}}}, {{key_name, key_text(key)}}};
    for (const TableRow& row : table) {
      const auto found = (row.*counts).find(key);
      const std::size_t count = found == (row.*counts).end() ? 0 : found->second;
      Attributes data = metric_of(metric, row.level);
      data.emplace_back(key_name, key_text(key));
      std::string text = std::to_string(count);
      if (count > 0 && row.samples > 0)
        text += " (" + percent(static_cast<double>(count) / static_cast<double>(row.samples)) + ")";
      line.cells.push_back(number_cell(std::move(text), static_cast<double>(count), std::move(data)));
    }
    result.rows.push_back(std::move(line));
  }
  return result;
}

[[nodiscard]] inline std::vector<Section> count_sections(std::span<const TableRow> table) {
  Section rewards{"rewards",
                  "Rewards",
                  {},
                  count_table(table, &TableRow::rewards, "reward-rows", "reward", "rewards", "reward"),
                  {}};
  rewards.paragraphs = {
      "The milestone reward of each scored sample: -1 rejected, 1 correct, 2 faster than eager, 3 faster than "
      "eager and torch.compile; samples of unfit tasks are left out."};
  Section rejections{"rejections",
                     "Rejections",
                     {"Why the rejected samples were rejected, by the evaluator's reason."},
                     count_table(table, &TableRow::rejections, "rejection-rows", "reason", "rejections", "reason"),
                     {}};
  rejections.table.when_empty = "no rejected samples";
  return {std::move(rewards), std::move(rejections)};
}

// ---------------------------------------------------------------------------------------
// Speedups of each level.

/// The solved samples of a level (0: of every level) with their speedups against a baseline.
[[nodiscard]] inline std::vector<std::pair<const ReportSample*, double>> solved_speedups(
    const BenchReport& report, int level, const std::optional<SpeedupEstimate> BenchSample::*baseline) {
  std::vector<std::pair<const ReportSample*, double>> speedups;
  for (const ReportSample& sample : report.samples) {
    if ((level != 0 && sample.metrics.level != level) || !sample.metrics.scored) continue;
    if (const std::optional<double> speedup = detail::solved_speedup(sample.metrics, baseline))
      speedups.emplace_back(&sample, *speedup);
  }
  return speedups;
}

[[nodiscard]] inline Section speedup_section(const BenchReport& report, std::span<const TableRow> table) {
  Section section{"speedups",
                  "Speedups",
                  {"The speedups of the solved samples (correct and timed) of each level: the baseline's median time "
                   "over the sample's."},
                  {"speedup-rows", {"against", "level", "solved samples", "min", "median", "max"}, {}},
                  {}};
  using Baseline = std::optional<SpeedupEstimate> BenchSample::*;
  for (const auto& against : {std::pair<std::string, Baseline>{"eager", &BenchSample::versus_eager},
                              std::pair<std::string, Baseline>{"compile", &BenchSample::versus_compile}}) {
    const std::string& name = against.first;
    const Baseline baseline = against.second;
    for (const TableRow& row : table) {
      std::vector<double> speedups;
      for (const auto& [sample, speedup] : solved_speedups(report, row.level, baseline)) speedups.push_back(speedup);
      std::sort(speedups.begin(), speedups.end());
      std::optional<double> low;
      std::optional<double> median;
      std::optional<double> high;
      if (!speedups.empty()) {
        const std::size_t middle = speedups.size() / 2;
        low = speedups.front();
        high = speedups.back();
        median = speedups.size() % 2 == 1 ? speedups[middle] : (speedups[middle - 1] + speedups[middle]) / 2;
      }
      const auto cell = [&](std::string_view statistic, const std::optional<double>& value) {
        Attributes data = metric_of("speedup_" + std::string(statistic), row.level);
        data.emplace_back("baseline", name);
        return number_cell(times(value), value, std::move(data));
      };
      Attributes count = metric_of("solved", row.level);
      count.emplace_back("baseline", name);
      section.table.rows.push_back(
          Row{{Cell{name, {}, {}}, Cell{level_title(row.level), {}, {}},
               number_cell(std::to_string(speedups.size()), static_cast<double>(speedups.size()), std::move(count)),
               cell("min", low), cell("median", median), cell("max", high)},
              {{"baseline", name}, {"level", level_key(row.level)}}});
    }
  }
  return section;
}

// ---------------------------------------------------------------------------------------
// The best sample of each task.

/// Whether `a` is a better answer to its task than `b`: scored, then higher reward, correct,
/// faster against compile, then eager, then the earlier sample.
[[nodiscard]] inline bool better_sample(const ReportSample& a, const ReportSample& b) {
  const auto rank = [](const ReportSample& sample) {
    const auto speed = [](const std::optional<SpeedupEstimate>& estimate) {
      return estimate && std::isfinite(estimate->speedup) ? estimate->speedup : 0.0;
    };
    const BenchSample& metrics = sample.metrics;
    return std::tuple(metrics.scored, metrics.reward, metrics.correct, speed(metrics.versus_compile),
                      speed(metrics.versus_eager), -metrics.sample);
  };
  return rank(a) > rank(b);
}

/// "value_mismatch", "correct, FASTER vs eager, SLOWER vs compile", "correct, not timed".
[[nodiscard]] inline std::string verdict_text(const BenchSample& sample) {
  std::string text;
  if (sample.rejection)
    text = std::string(to_string(*sample.rejection));
  else if (!sample.correct)
    text = "incorrect";
  else if (!sample.versus_eager && !sample.versus_compile)
    text = "correct, not timed";
  else
    text = "correct";
  if (sample.correct && sample.versus_eager)
    text += ", " + std::string(to_string(sample.versus_eager->verdict)) + " vs eager";
  if (sample.correct && sample.versus_compile)
    text += ", " + std::string(to_string(sample.versus_compile->verdict)) + " vs compile";
  if (!sample.scored) text += " (unscored)";
  return text;
}

[[nodiscard]] inline Row task_row(const ReportSample& best, std::size_t samples, std::size_t correct) {
  const BenchSample& metrics = best.metrics;
  const auto attributes = [&](std::string_view metric) { return metric_of(metric, metrics.level); };
  const auto speedup = [&](std::string_view metric, const std::optional<SpeedupEstimate>& estimate) {
    const std::optional<double> value = estimate ? std::optional<double>(estimate->speedup) : std::nullopt;
    return number_cell(times(value), value, attributes(metric));
  };
  const std::string candidate = "candidates/" + best.name + "/";
  return Row{
      {Cell{level_key(metrics.level), {}, {}}, Cell{task_label(metrics.task), {}, attributes("task")},
       number_cell(std::to_string(samples), static_cast<double>(samples), attributes("task_samples")),
       number_cell(std::to_string(correct), static_cast<double>(correct), attributes("task_correct")),
       Cell{best.name, "samples/" + best.name + ".json", attributes("best_sample")},
       number_cell(exact(metrics.reward), metrics.reward, attributes("best_reward")),
       Cell{verdict_text(metrics), {}, attributes("best_verdict")}, speedup("best_speedup_eager", metrics.versus_eager),
       speedup("best_speedup_compile", metrics.versus_compile),
       best.has_candidate ? Cell{candidate, candidate, attributes("best_candidate")}
                          : Cell{std::string(no_value), {}, attributes("best_candidate")},
       Cell{shortened(best.message, 240), {}, attributes("best_message")}},
      {{"task", metrics.task}, {"level", level_key(metrics.level)}, {"sample", best.name}}};
}

[[nodiscard]] inline Section task_section(const BenchReport& report) {
  Section section{"tasks",
                  "Tasks",
                  {"The best sample of each task (scored, then the highest reward, correct, fastest against "
                   "torch.compile, then against eager), with links to its record and to its laid-out sources."},
                  {"task-rows",
                   {"level", "task", "samples", "correct", "best sample", "reward", "verdict", "vs eager", "vs compile",
                    "candidate", "message"},
                   {}},
                  {}};
  struct Summary {
    const ReportSample* best = nullptr;
    std::size_t samples = 0;
    std::size_t correct = 0;
  };
  std::vector<Summary> summaries;
  std::map<std::pair<int, std::string>, std::size_t> index;
  for (const ReportSample& sample : report.samples) {
    const auto [at, added] = index.emplace(std::pair{sample.metrics.level, sample.metrics.task}, summaries.size());
    if (added) summaries.push_back(Summary{&sample, 0, 0});
    Summary& summary = summaries[at->second];
    ++summary.samples;
    if (sample.metrics.correct) ++summary.correct;
    if (better_sample(sample, *summary.best)) summary.best = &sample;
  }
  for (const Summary& summary : summaries)
    section.table.rows.push_back(task_row(*summary.best, summary.samples, summary.correct));
  return section;
}

/// Every section, in the order both forms show them.
[[nodiscard]] inline std::vector<Section> sections(const BenchReport& report, std::span<const TableRow> table) {
  std::vector<Section> all{table_one_section(table), fast_p_section(table)};
  for (Section& counts : count_sections(table)) all.push_back(std::move(counts));
  all.push_back(speedup_section(report, table));
  all.push_back(task_section(report));
  return all;
}

/// "1 task", "2 tasks".
[[nodiscard]] inline std::string counted(std::size_t count, std::string_view noun) {
  return std::to_string(count) + " " + std::string(noun) + (count == 1 ? "" : "s");
}

/// What the report opens with: where the samples came from and how many there are.
[[nodiscard]] inline std::vector<std::string> introduction(const BenchReport& report, const TableRow& overall) {
  std::vector<std::string> paragraphs;
  if (!report.generations.empty()) paragraphs.push_back("Generations: " + report.generations);
  if (report.samples.empty())
    paragraphs.emplace_back("No samples: nothing was scored.");
  else
    paragraphs.push_back(counted(overall.samples, "scored sample") + " of " + counted(overall.tasks, "task") +
                         ". Records: results.json and samples/<sample>.json beside this report.");
  if (report.unscored > 0)
    paragraphs.push_back("Left unscored, failed for reasons not their own: " + counted(report.unscored, "sample") +
                         ". They count nowhere; running bench again with the same --out retries them.");
  return paragraphs;
}

[[nodiscard]] inline std::vector<BenchSample> metrics_of(const BenchReport& report) {
  std::vector<BenchSample> metrics;
  metrics.reserve(report.samples.size());
  for (const ReportSample& sample : report.samples) metrics.push_back(sample.metrics);
  return metrics;
}

// ---------------------------------------------------------------------------------------
// Markdown.

[[nodiscard]] inline std::string markdown_table(const Table& table) {
  if (table.rows.empty()) return escape_markdown(table.when_empty) + "\n";
  std::string out = "|";
  for (const std::string& column : table.columns) out += " " + escape_markdown(column) + " |";
  out += "\n|";
  for (std::size_t column = 0; column < table.columns.size(); ++column) out += " --- |";
  out += "\n";
  for (const Row& row : table.rows) {
    out += "|";
    for (const Cell& cell : row.cells)
      out += " " +
             (cell.link.empty() ? escape_markdown(cell.text)
                                : "[" + escape_markdown(cell.text) + "](" + encode_link(cell.link) + ")") +
             " |";
    out += "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// HTML and its plots.

[[nodiscard]] inline std::string html_attributes(const Attributes& data) {
  std::string out;
  for (const auto& [name, value] : data) out += " data-" + name + "=\"" + escape_html(value) + "\"";
  return out;
}

[[nodiscard]] inline std::string html_table(const Table& table) {
  if (table.rows.empty())
    return "<p class=\"empty\" data-empty=\"" + table.id + "\">" + escape_html(table.when_empty) + "</p>\n";
  std::string out = "<table id=\"" + table.id + "\">\n<thead><tr>";
  for (const std::string& column : table.columns) out += "<th scope=\"col\">" + escape_html(column) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const Row& row : table.rows) {
    out += "<tr" + html_attributes(row.data) + ">";
    for (std::size_t index = 0; index < row.cells.size(); ++index) {
      const Cell& cell = row.cells[index];
      const std::string tag = index == 0 ? "th" : "td";
      out += "<" + tag + (index == 0 ? " scope=\"row\"" : "") + html_attributes(cell.data) + ">";
      out += cell.link.empty()
                 ? escape_html(cell.text)
                 : "<a href=\"" + escape_html(encode_link(cell.link)) + "\">" + escape_html(cell.text) + "</a>";
      out += "</" + tag + ">";
    }
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

/// The colour of a level's series; the whole run is drawn in black.
[[nodiscard]] inline std::string series_colour(int level) {
  static constexpr std::string_view palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};
  if (level == 0) return "#222222";
  return std::string(palette[static_cast<std::size_t>(level - 1) % std::size(palette)]);
}

/// The box a plot draws in, inside its SVG's width and height.
struct PlotArea {
  double width = 0;
  double height = 0;
  double left = 0;
  double right = 0;
  double top = 0;
  double bottom = 0;
  [[nodiscard]] double inner_width() const { return width - left - right; }
  [[nodiscard]] double inner_height() const { return height - top - bottom; }
};

[[nodiscard]] inline std::string svg_open(std::string_view id, const PlotArea& area, std::string_view title) {
  return "<svg id=\"" + std::string(id) + "\" class=\"plot\" role=\"img\" width=\"" + fixed(area.width, 0) +
         "\" height=\"" + fixed(area.height, 0) + "\" viewBox=\"0 0 " + fixed(area.width, 0) + " " +
         fixed(area.height, 0) + "\" aria-label=\"" + escape_html(title) + "\">\n<title>" + escape_html(title) +
         "</title>\n";
}

[[nodiscard]] inline std::string svg_text(double x, double y, std::string_view text, std::string_view anchor,
                                          std::string_view css_class = "") {
  return "<text x=\"" + fixed(x, 1) + "\" y=\"" + fixed(y, 1) + "\" text-anchor=\"" + std::string(anchor) + "\"" +
         (css_class.empty() ? "" : " class=\"" + std::string(css_class) + "\"") + ">" + escape_html(text) + "</text>\n";
}

[[nodiscard]] inline std::string svg_line(double x1, double y1, double x2, double y2, std::string_view css_class) {
  return "<line class=\"" + std::string(css_class) + "\" x1=\"" + fixed(x1, 1) + "\" y1=\"" + fixed(y1, 1) +
         "\" x2=\"" + fixed(x2, 1) + "\" y2=\"" + fixed(y2, 1) + "\"/>\n";
}

[[nodiscard]] inline std::string svg_point(double x, double y, const std::string& colour, const Attributes& data,
                                           std::string_view title) {
  return "<circle cx=\"" + fixed(x, 1) + "\" cy=\"" + fixed(y, 1) + "\" r=\"3.5\" fill=\"" + colour + "\"" +
         html_attributes(data) + "><title>" + escape_html(title) + "</title></circle>\n";
}

/// fast_p over p against one baseline: a curve per level and one for the whole run.
[[nodiscard]] inline std::string fast_p_plot(std::span<const TableRow> table, const std::string& baseline,
                                             const std::map<double, double> TableRow::*shares) {
  const PlotArea area{520, 300, 52, 110, 20, 44};
  const double last_p = fast_p_thresholds[std::size(fast_p_thresholds) - 1];
  const auto x = [&](double p) { return area.left + p / last_p * area.inner_width(); };
  const auto y = [&](double share) { return area.top + (1 - share) * area.inner_height(); };
  std::string svg = svg_open("fast-p-" + baseline, area, "fast_p against " + baseline + ", by level");
  for (double share : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    svg += svg_line(area.left, y(share), area.left + area.inner_width(), y(share), "grid");
    svg += svg_text(area.left - 6, y(share) + 4, fixed(100 * share, 0) + "%", "end");
  }
  for (double p : fast_p_thresholds) {
    svg += svg_line(x(p), area.top + area.inner_height(), x(p), area.top + area.inner_height() + 4, "axis");
    svg += svg_text(x(p), area.top + area.inner_height() + 16, exact(p), "middle");
  }
  svg += svg_line(area.left, area.top, area.left, area.top + area.inner_height(), "axis");
  svg += svg_line(area.left, y(0), area.left + area.inner_width(), y(0), "axis");
  svg += svg_text(area.left + area.inner_width() / 2, area.height - 6,
                  "p: correct and more than p times as fast as " + baseline, "middle");
  std::size_t series = 0;
  for (const TableRow& row : table) {
    if (row.samples == 0) continue;
    const std::string colour = series_colour(row.level);
    std::string points;
    std::string circles;
    for (double p : fast_p_thresholds) {
      const auto share = (row.*shares).find(p);
      if (share == (row.*shares).end()) continue;
      points += (points.empty() ? "" : " ") + fixed(x(p), 1) + "," + fixed(y(share->second), 1);
      Attributes data = metric_of("fast_p", row.level);
      data.emplace_back("baseline", baseline);
      data.emplace_back("p", exact(p));
      data.emplace_back("value", exact(share->second));
      circles += svg_point(x(p), y(share->second), colour, data,
                           level_title(row.level) + ": fast_" + exact(p) + " = " + percent(share->second));
    }
    svg += "<polyline class=\"series\" fill=\"none\" stroke=\"" + colour + "\"" +
           html_attributes({{"level", level_key(row.level)}, {"baseline", baseline}}) + " points=\"" + points +
           "\"/>\n" + circles;
    const double legend_y = area.top + 8 + 18 * static_cast<double>(series++);
    const double legend_x = area.width - area.right + 12;
    svg += "<line class=\"legend\" stroke=\"" + colour + "\" x1=\"" + fixed(legend_x, 1) + "\" y1=\"" +
           fixed(legend_y, 1) + "\" x2=\"" + fixed(legend_x + 20, 1) + "\" y2=\"" + fixed(legend_y, 1) + "\"/>\n" +
           svg_text(legend_x + 26, legend_y + 4, level_title(row.level), "start");
  }
  if (series == 0) svg += svg_text(area.left + area.inner_width() / 2, y(0.5), "no samples", "middle", "empty");
  return svg + "</svg>\n";
}

/// The speedups of each level's solved samples against one baseline, on a log scale: a band
/// per level, a point per sample (its exact speedup in data-value, its name in data-sample).
/// Speedups beyond 1/64x or 64x are drawn at the edge.
[[nodiscard]] inline std::string speedup_plot(const BenchReport& report, std::span<const TableRow> table,
                                              const std::string& baseline,
                                              const std::optional<SpeedupEstimate> BenchSample::*estimate) {
  std::vector<std::pair<int, std::vector<std::pair<const ReportSample*, double>>>> bands;
  double lowest = 0;
  double highest = 0;
  for (const TableRow& row : table) {
    if (row.level == 0) continue;
    bands.emplace_back(row.level, solved_speedups(report, row.level, estimate));
    for (const auto& [sample, speedup] : bands.back().second) {
      lowest = std::min(lowest, std::log2(speedup));
      highest = std::max(highest, std::log2(speedup));
    }
  }
  constexpr double band_height = 40;
  const PlotArea area{
      520, 20 + band_height * static_cast<double>(std::max<std::size_t>(bands.size(), 1)) + 44, 90, 20, 20, 44};
  const double low = std::clamp(std::floor(lowest), -6.0, -1.0);
  const double high = std::clamp(std::ceil(highest), 1.0, 6.0);
  const auto x = [&](double speedup) {
    return area.left + (std::clamp(std::log2(speedup), low, high) - low) / (high - low) * area.inner_width();
  };
  std::string svg = svg_open("speedups-" + baseline, area, "speedups against " + baseline + " of solved samples");
  for (int power = static_cast<int>(low); power <= static_cast<int>(high); ++power) {
    const double tick = x(std::ldexp(1.0, power));
    svg += svg_line(tick, area.top, tick, area.top + area.inner_height(), power == 0 ? "unit" : "grid");
    svg += svg_text(tick, area.top + area.inner_height() + 16, exact(std::ldexp(1.0, power)) + "x", "middle");
  }
  svg += svg_text(area.left + area.inner_width() / 2, area.height - 6, "speedup against " + baseline + " (log scale)",
                  "middle");
  std::size_t points = 0;
  for (std::size_t band = 0; band < bands.size(); ++band) {
    const auto& [level, speedups] = bands[band];
    const double middle = area.top + band_height * (static_cast<double>(band) + 0.5);
    svg +=
        svg_text(area.left - 8, middle + 4, level_title(level) + " (" + std::to_string(speedups.size()) + ")", "end");
    for (std::size_t index = 0; index < speedups.size(); ++index) {
      const auto& [sample, speedup] = speedups[index];
      // Spread the points of a band over its height (0, above, below, further above, ...)
      // so that equal speedups stay apart.
      const std::size_t turn = index % 9;
      const std::size_t steps = (turn + 1) / 2;
      const double offset = (turn % 2 == 1 ? -1.0 : 1.0) * static_cast<double>(steps) * band_height / 12;
      Attributes data = metric_of("speedup", level);
      data.emplace_back("baseline", baseline);
      data.emplace_back("sample", sample->name);
      data.emplace_back("value", exact(speedup));
      svg += svg_point(x(speedup), middle + offset, series_colour(level), data,
                       sample->name + ": " + times(speedup) + " vs " + baseline);
      ++points;
    }
  }
  if (points == 0)
    svg += svg_text(area.left + area.inner_width() / 2, area.top + area.inner_height() / 2,
                    report.samples.empty() ? "no samples" : "no correct timed samples", "middle", "empty");
  return svg + "</svg>\n";
}

inline constexpr std::string_view page_style = R"(
body { font-family: system-ui, sans-serif; color: #1b1b1b; max-width: 1280px; margin: 1.5em auto; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.8em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #cfcfcf; padding: 3px 8px; text-align: right; vertical-align: top; }
thead th { background: #f0f0f0; }
th[scope=row], td[data-metric=task], td[data-metric=best_sample], td[data-metric=best_verdict],
td[data-metric=best_candidate], td[data-metric=best_message] { text-align: left; }
tr[data-source=paper] { color: #555; font-style: italic; background: #f8f8f8; }
p.empty, text.empty { color: #777; font-style: italic; }
svg.plot { border: 1px solid #ddd; margin: 0 1em 1em 0; background: #fff; }
svg text { font-size: 11px; fill: #333; }
svg line.grid { stroke: #e6e6e6; }
svg line.axis { stroke: #555; }
svg line.unit { stroke: #999; stroke-dasharray: 4 3; }
svg polyline.series { stroke-width: 2; }
svg line.legend { stroke-width: 3; }
)";

}  // namespace detail::report

/// The report in Markdown (report.md).
[[nodiscard]] inline std::string render_bench_markdown(const BenchReport& report) {
  namespace report_detail = detail::report;
  const std::vector<BenchSample> metrics = report_detail::metrics_of(report);
  const std::vector<TableRow> table = table_one(metrics);
  std::string out = "# cuda-agent bench report\n\n";
  for (const std::string& paragraph : report_detail::introduction(report, table.back()))
    out += report_detail::escape_markdown(paragraph) + "\n\n";
  for (const report_detail::Section& section : report_detail::sections(report, table)) {
    out += "## " + report_detail::escape_markdown(section.title) + "\n\n";
    for (const std::string& paragraph : section.paragraphs) out += report_detail::escape_markdown(paragraph) + "\n\n";
    out += report_detail::markdown_table(section.table) + "\n";
  }
  return out;
}

/// The report as one HTML page (report.html): the same tables, and fast_p and speedup plots.
[[nodiscard]] inline std::string render_bench_html(const BenchReport& report) {
  namespace report_detail = detail::report;
  const std::vector<BenchSample> metrics = report_detail::metrics_of(report);
  const std::vector<TableRow> table = table_one(metrics);
  std::vector<report_detail::Section> sections = report_detail::sections(report, table);
  for (report_detail::Section& section : sections) {
    if (section.id == "fast-p")
      section.plots = report_detail::fast_p_plot(table, "eager", &TableRow::fast_p_eager) +
                      report_detail::fast_p_plot(table, "compile", &TableRow::fast_p_compile);
    if (section.id == "speedups")
      section.plots = report_detail::speedup_plot(report, table, "compile", &BenchSample::versus_compile) +
                      report_detail::speedup_plot(report, table, "eager", &BenchSample::versus_eager);
  }
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>cuda-agent bench "
      "report</title>\n<style>" +
      std::string(report_detail::page_style) + "</style>\n</head>\n<body>\n<h1>cuda-agent bench report</h1>\n";
  for (const std::string& paragraph : report_detail::introduction(report, table.back()))
    out += "<p class=\"introduction\">" + report_detail::escape_html(paragraph) + "</p>\n";
  for (const report_detail::Section& section : sections) {
    out += "<section id=\"" + section.id + "\">\n<h2>" + report_detail::escape_html(section.title) + "</h2>\n";
    for (const std::string& paragraph : section.paragraphs)
      out += "<p>" + report_detail::escape_html(paragraph) + "</p>\n";
    if (!section.plots.empty()) out += "<div class=\"plots\">\n" + section.plots + "</div>\n";
    out += report_detail::html_table(section.table) + "</section>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace cuda_agent
