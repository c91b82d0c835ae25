// SPDX-License-Identifier: Apache-2.0
// The report of a benchmark run (report.md, report.html): numbers computed by hand, escaping
// of what comes from files, and runs with nothing to show.
#include "catch.hpp"

#include <cuda_agent/bench/bench_report.hpp>

#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ca = cuda_agent;
using ca::Verdict;

namespace {

ca::ReportSample report_sample(const char* name, const char* task, int level, int number, double reward) {
  ca::ReportSample reported;
  reported.name = name;
  reported.metrics.task = task;
  reported.metrics.level = level;
  reported.metrics.sample = number;
  reported.metrics.reward = reward;
  return reported;
}

ca::ReportSample timed_sample(ca::ReportSample reported, double eager, Verdict eager_verdict, double compile,
                              Verdict compile_verdict) {
  reported.metrics.correct = true;
  reported.metrics.versus_eager = ca::SpeedupEstimate{.baseline = "eager", .speedup = eager, .verdict = eager_verdict};
  reported.metrics.versus_compile =
      ca::SpeedupEstimate{.baseline = "compile", .speedup = compile, .verdict = compile_verdict};
  return reported;
}

ca::ReportSample rejected_sample(ca::ReportSample reported, ca::RejectionReason reason, const char* message) {
  reported.metrics.rejection = reason;
  reported.message = message;
  return reported;
}

constexpr const char* odd_task = "tasks/level1/2_Odd<&>\"Name|x.py";

// Level 1: ReLU solved and faster (and one rejected sample), a task with an odd name solved
// but not timed. Level 2: Gemm solved but slower by its second sample, a task unfit to score.
ca::BenchReport two_level_report() {
  ca::BenchReport report;
  report.generations = "runs/<model>";
  ca::ReportSample relu = timed_sample(report_sample("level_1_problem_1_sample_0", "tasks/level1/1_ReLU.py", 1, 0, 3),
                                       2.0, Verdict::faster, 1.5, Verdict::faster);
  relu.has_candidate = true;
  report.samples.push_back(relu);
  report.samples.push_back(
      rejected_sample(report_sample("level_1_problem_1_sample_1", "tasks/level1/1_ReLU.py", 1, 1, -1),
                      ca::RejectionReason::value_mismatch, "differs at <0, 1>"));
  ca::ReportSample odd = report_sample("level_1_problem_2_sample_0", odd_task, 1, 0, 1);
  odd.metrics.correct = true;
  report.samples.push_back(odd);
  report.samples.push_back(
      rejected_sample(report_sample("level_2_problem_3_sample_0", "tasks/level2/3_Gemm.py", 2, 0, -1),
                      ca::RejectionReason::compile_error, "nvcc failed"));
  report.samples.push_back(timed_sample(report_sample("level_2_problem_3_sample_1", "tasks/level2/3_Gemm.py", 2, 1, 1),
                                        0.5, Verdict::slower, 0.25, Verdict::slower));
  ca::ReportSample unfit =
      rejected_sample(report_sample("level_2_problem_4_sample_0", "tasks/level2/4_Copy.py", 2, 0, 0),
                      ca::RejectionReason::task_unfit, "a null model passes <every> input & set");
  unfit.metrics.scored = false;
  report.samples.push_back(unfit);
  report.unscored = 2;
  return report;
}

/// The exact value and the text of the page's table cell whose attributes start with
/// `attributes`.
struct ShownNumber {
  double value = 0;
  std::string text;
};

std::optional<ShownNumber> html_cell(const std::string& html, const std::string& attributes) {
  const std::string opening = "<td " + attributes + " data-value=\"";
  const std::size_t at = html.find(opening);
  if (at == std::string::npos) return std::nullopt;
  const std::size_t value = at + opening.size();
  const std::size_t text = html.find('>', value) + 1;
  return ShownNumber{std::stod(html.substr(value, html.find('"', value) - value)),
                     html.substr(text, html.find('<', text) - text)};
}

/// The SVG element with this id, whole.
std::string svg_of(const std::string& html, const std::string& id) {
  const std::size_t at = html.find("<svg id=\"" + id + "\"");
  if (at == std::string::npos) return {};
  return html.substr(at, html.find("</svg>", at) + 6 - at);
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

}  // namespace

TEST_CASE("the Markdown report shows Table 1 by level beside the paper's rows") {
  const std::string markdown = ca::render_bench_markdown(two_level_report());
  // Level 1: 3 scored samples, 2 correct; eager speedups 2 of the one timed (solved 2, all
  // 2^(1/3)); compile 1.5 (all 1.5^(1/3)).
  CHECK_THAT(markdown,
             Catch::Contains("| level 1 | 3 | 2 | 2 | 66.7% | 33.3% | 33.3% | 2.00x | 1.26x | 1.50x | 1.14x |"));
  // Level 2: the unfit task costs a task but no sample; Gemm solved at 0.5 and 0.25.
  CHECK_THAT(markdown,
             Catch::Contains("| level 2 | 2 | 2 | 1 | 50.0% | 0.0% | 0.0% | 0.50x | 0.71x | 0.25x | 0.50x |"));
  // All: eager sqrt(2 * 0.5) = 1; compile sqrt(0.375) = 0.612, 0.375^(1/5) = 0.822.
  CHECK_THAT(markdown, Catch::Contains("| all | 5 | 4 | 3 | 60.0% | 20.0% | 20.0% | 1.00x | 1.00x | 0.61x | 0.82x |"));
  CHECK_THAT(markdown,
             Catch::Contains("| level 1, CUDA Agent paper | – | – | – | 100% | 99% | 97% | – | – | 1.87x | – |"));
  CHECK_THAT(markdown,
             Catch::Contains("| all, CUDA Agent paper | – | – | – | 98.8% | 98.4% | 96.8% | 2.60x | – | 2.11x | – |"));
  CHECK_THAT(markdown, !Catch::Contains("level 3, CUDA Agent paper"));  // no level 3 in this run
  CHECK_THAT(markdown, Catch::Contains("not a like-for-like comparison"));
  CHECK_THAT(markdown, Catch::Contains("Left unscored, failed for reasons not their own: 2 samples."));
}

TEST_CASE("the Markdown report shows fast_p, rewards, rejections and speedups") {
  const std::string markdown = ca::render_bench_markdown(two_level_report());
  CHECK_THAT(markdown,
             Catch::Contains("| against | level | fast\\_0 | fast\\_0.5 | fast\\_0.8 | fast\\_1 | fast\\_1.5 | "
                             "fast\\_2 |"));
  // fast_p is strict: 2.0 is not above 2, 1.5 not above 1.5, 0.5 not above 0.5.
  CHECK_THAT(markdown, Catch::Contains("| eager | level 1 | 33.3% | 33.3% | 33.3% | 33.3% | 33.3% | 0.0% |"));
  CHECK_THAT(markdown, Catch::Contains("| eager | level 2 | 50.0% | 0.0% | 0.0% | 0.0% | 0.0% | 0.0% |"));
  CHECK_THAT(markdown, Catch::Contains("| eager | all | 40.0% | 20.0% | 20.0% | 20.0% | 20.0% | 0.0% |"));
  CHECK_THAT(markdown, Catch::Contains("| compile | all | 40.0% | 20.0% | 20.0% | 20.0% | 0.0% | 0.0% |"));
  // Rewards of scored samples only: the unfit sample's 0 is not among them.
  CHECK_THAT(markdown, Catch::Contains("| -1 | 1 (33.3%) | 1 (50.0%) | 2 (40.0%) |"));
  CHECK_THAT(markdown, Catch::Contains("| 3 | 1 (33.3%) | 0 | 1 (20.0%) |"));
  CHECK_THAT(markdown, !Catch::Contains("\n| 0 | "));
  CHECK_THAT(markdown, Catch::Contains("| compile\\_error | 0 | 1 (50.0%) | 1 (20.0%) |"));
  CHECK_THAT(markdown, Catch::Contains("| eager | all | 2 | 0.50x | 1.25x | 2.00x |"));
  CHECK_THAT(markdown, Catch::Contains("| compile | level 1 | 1 | 1.50x | 1.50x | 1.50x |"));
}

TEST_CASE("the Markdown report lists each task's best sample with links to its files") {
  const std::string markdown = ca::render_bench_markdown(two_level_report());
  CHECK_THAT(markdown, Catch::Contains("| 1 | 1\\_ReLU | 2 | 1 | [level\\_1\\_problem\\_1\\_sample\\_0]"
                                       "(samples/level_1_problem_1_sample_0.json) | 3 | correct, FASTER vs eager, "
                                       "FASTER vs compile | 2.00x | 1.50x | [candidates/level\\_1\\_problem\\_1\\_"
                                       "sample\\_0/](candidates/level_1_problem_1_sample_0/) |  |"));
  // The second sample of Gemm is its best; it has no laid-out candidate.
  CHECK_THAT(markdown,
             Catch::Contains("[level\\_2\\_problem\\_3\\_sample\\_1](samples/level_2_problem_3_sample_1.json) | "
                             "1 | correct, SLOWER vs eager, SLOWER vs compile | 0.50x | 0.25x | – |"));
  CHECK_THAT(markdown, Catch::Contains("| 1 | correct, not timed | – | – | – |"));
  CHECK_THAT(markdown, Catch::Contains("| 0 | task\\_unfit (unscored) | – | – | – | a null model passes &lt;every&gt; "
                                       "input &amp; set |"));
  // Names from files cannot break the table or bring markup.
  CHECK_THAT(markdown, Catch::Contains("| 2\\_Odd&lt;&amp;&gt;\"Name\\|x |"));
  CHECK_THAT(markdown, !Catch::Contains("<&>"));
  CHECK_THAT(markdown, Catch::Contains("Generations: runs/&lt;model&gt;"));
  CHECK_THAT(markdown, Catch::Contains("5 scored samples of 4 tasks."));
}

TEST_CASE("the HTML report carries every number with its exact value") {
  const std::string html = ca::render_bench_html(two_level_report());
  const auto pass = html_cell(html, R"(data-metric="pass_rate" data-level="1")");
  REQUIRE(pass);
  CHECK(pass->value == Approx(2.0 / 3.0));
  CHECK(pass->text == "66.7%");
  const auto compile_all = html_cell(html, R"(data-metric="geomean_compile_all" data-level="all")");
  REQUIRE(compile_all);
  CHECK(compile_all->value == Approx(std::pow(0.375, 0.2)));
  CHECK(compile_all->text == "0.82x");
  const auto fast = html_cell(html, R"(data-metric="fast_p" data-level="all" data-baseline="compile" data-p="0.5")");
  REQUIRE(fast);
  CHECK(fast->value == Approx(0.2));
  CHECK(fast->text == "20.0%");
  const auto rewards = html_cell(html, R"(data-metric="rewards" data-level="all" data-reward="-1")");
  REQUIRE(rewards);
  CHECK(rewards->value == 2);
  CHECK(rewards->text == "2 (40.0%)");
  // A mean without a solved sample has no value to carry; level 2's rates have theirs.
  CHECK(html_cell(html, R"(data-metric="faster_than_eager_rate" data-level="2")")->text == "0.0%");
  CHECK_THAT(html, Catch::Contains(R"(<td data-paper="geomean_compile_solved">1.87x</td>)"));
  CHECK_THAT(html, Catch::Contains(R"(<tr data-level="all" data-source="paper">)"));
  // Self-contained: no script, no stylesheet or image to fetch.
  CHECK_THAT(html, !Catch::Contains("<script"));
  CHECK_THAT(html, !Catch::Contains("<link"));
  CHECK_THAT(html, !Catch::Contains("src="));
  CHECK_THAT(html, !Catch::Contains("url("));
}

TEST_CASE("the HTML report escapes what comes from files") {
  const std::string html = ca::render_bench_html(two_level_report());
  CHECK_THAT(html, Catch::Contains(R"(<td data-metric="task" data-level="1">2_Odd&lt;&amp;&gt;&quot;Name|x</td>)"));
  CHECK_THAT(html, Catch::Contains(R"(data-task="tasks/level1/2_Odd&lt;&amp;&gt;&quot;Name|x.py")"));
  CHECK_THAT(html, Catch::Contains("a null model passes &lt;every&gt; input &amp; set"));
  CHECK_THAT(html, Catch::Contains("Generations: runs/&lt;model&gt;"));
  CHECK_THAT(html, !Catch::Contains("<&>"));
  CHECK_THAT(html, !Catch::Contains("<every>"));
  CHECK_THAT(html, !Catch::Contains("<model>"));
  CHECK_THAT(html, Catch::Contains(R"(<a href="samples/level_1_problem_2_sample_0.json">)"));
}

TEST_CASE("the HTML report plots fast_p by level and the speedups of solved samples") {
  const std::string html = ca::render_bench_html(two_level_report());
  const std::string eager = svg_of(html, "fast-p-eager");
  REQUIRE_FALSE(eager.empty());
  // A curve for level 1, level 2 and the whole run, six points each.
  CHECK(count_of(eager, "<polyline") == 3);
  CHECK(count_of(eager, "<circle") == 18);
  // x = 52 + p / 2 * 358, y = 20 + (1 - share) * 236.
  CHECK_THAT(eager, Catch::Contains(R"(data-level="all" data-baseline="eager" points="52.0,161.6 141.5,208.8 )"
                                    R"(195.2,208.8 231.0,208.8 320.5,208.8 410.0,256.0")"));
  CHECK_THAT(eager, Catch::Contains(R"(data-metric="fast_p" data-level="1" data-baseline="eager" data-p="2" )"
                                    R"(data-value="0")"));
  CHECK_FALSE(svg_of(html, "fast-p-compile").empty());
  const std::string compile = svg_of(html, "speedups-compile");
  CHECK(count_of(compile, "<circle") == 2);
  CHECK_THAT(compile, Catch::Contains(R"(data-sample="level_2_problem_3_sample_1" data-value="0.25")"));
  CHECK_THAT(compile, Catch::Contains(R"(data-sample="level_1_problem_1_sample_0" data-value="1.5")"));
  CHECK(count_of(svg_of(html, "speedups-eager"), "<circle") == 2);
}

TEST_CASE("a level without a solved or a scored sample shows dashes, not zeros or NaN") {
  ca::BenchReport report;
  ca::ReportSample untimed = report_sample("level_1_problem_1_sample_0", "tasks/level1/1_ReLU.py", 1, 0, 1);
  untimed.metrics.correct = true;
  report.samples.push_back(untimed);
  ca::ReportSample unfit =
      rejected_sample(report_sample("level_2_problem_1_sample_0", "tasks/level2/1_Copy.py", 2, 0, 0),
                      ca::RejectionReason::task_unfit, "");
  unfit.metrics.scored = false;
  report.samples.push_back(unfit);
  report.samples.push_back(
      rejected_sample(report_sample("level_3_problem_1_sample_0", "tasks/level3/1_Net.py", 3, 0, -1),
                      ca::RejectionReason::crashed, "signal 11"));
  const std::string markdown = ca::render_bench_markdown(report);
  CHECK_THAT(markdown, Catch::Contains("| level 1 | 1 | 1 | 1 | 100.0% | 0.0% | 0.0% | – | 1.00x | – | 1.00x |"));
  CHECK_THAT(markdown, Catch::Contains("| level 2 | 0 | 1 | 0 | – | – | – | – | – | – | – |"));
  CHECK_THAT(markdown, Catch::Contains("| level 3 | 1 | 1 | 0 | 0.0% | 0.0% | 0.0% | – | 1.00x | – | 1.00x |"));
  CHECK_THAT(markdown,
             Catch::Contains("| level 3, CUDA Agent paper | – | – | – | 94% | 94% | 90% | – | – | 1.52x | – |"));
  CHECK_THAT(markdown, Catch::Contains("| eager | level 2 | – | – | – | – | – | – |"));
  CHECK_THAT(markdown, Catch::Contains("| compile | all | 0 | – | – | – |"));
  const std::string html = ca::render_bench_html(report);
  CHECK_THAT(svg_of(html, "speedups-compile"), Catch::Contains("no correct timed samples"));
  CHECK(count_of(svg_of(html, "fast-p-eager"), "<polyline") == 3);  // levels 1 and 3, and all
  for (const std::string* text : {&markdown, &html}) {
    CHECK_THAT(*text, !Catch::Contains("nan"));
    CHECK_THAT(*text, !Catch::Contains("inf"));
  }
}

TEST_CASE("a run without samples renders, and says so") {
  const ca::BenchReport empty;
  const std::string markdown = ca::render_bench_markdown(empty);
  CHECK_THAT(markdown, Catch::Contains("No samples: nothing was scored."));
  CHECK_THAT(markdown, Catch::Contains("| all | 0 | 0 | 0 | – | – | – | – | – | – | – |"));
  CHECK_THAT(markdown, Catch::Contains("## Tasks"));
  const std::string html = ca::render_bench_html(empty);
  CHECK_THAT(html, Catch::Contains(R"(<p class="empty" data-empty="task-rows">no samples</p>)"));
  CHECK_THAT(svg_of(html, "fast-p-compile"), Catch::Contains(">no samples</text>"));
  CHECK_THAT(svg_of(html, "speedups-eager"), Catch::Contains(">no samples</text>"));
  CHECK(count_of(html, "<circle") == 0);
  for (const std::string* text : {&markdown, &html}) {
    CHECK_THAT(*text, !Catch::Contains("nan"));
    CHECK_THAT(*text, !Catch::Contains("inf"));
  }
}
