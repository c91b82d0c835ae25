// SPDX-License-Identifier: Apache-2.0
// Table 1 and fast_p from scored samples, against values computed by hand.
#include "catch.hpp"

#include <cuda_agent/bench/table_metrics.hpp>

#include <cmath>
#include <vector>

namespace ca = cuda_agent;

namespace {

ca::BenchSample correct(const char* task, int level, double eager, ca::Verdict eager_verdict, double compile,
                        ca::Verdict compile_verdict, double reward) {
  ca::BenchSample sample;
  sample.task = task;
  sample.level = level;
  sample.correct = true;
  // The intervals do not enter the metrics: the verdicts carry them.
  sample.versus_eager = ca::SpeedupEstimate{.baseline = "eager", .speedup = eager, .verdict = eager_verdict};
  sample.versus_compile = ca::SpeedupEstimate{.baseline = "compile", .speedup = compile, .verdict = compile_verdict};
  sample.reward = reward;
  return sample;
}

ca::BenchSample rejected(const char* task, int level, ca::RejectionReason reason) {
  ca::BenchSample sample;
  sample.task = task;
  sample.level = level;
  sample.rejection = reason;
  return sample;
}

using ca::Verdict;

// Level 1: four samples of two tasks; level 2: one solved sample and one unfit task.
std::vector<ca::BenchSample> run() {
  std::vector<ca::BenchSample> samples = {
      correct("a", 1, 4.0, Verdict::faster, 2.0, Verdict::faster, 3),
      correct("a", 1, 1.0, Verdict::same, 0.5, Verdict::slower, 1),
      // Above 1 in its point estimate, yet not FASTER: not counted as faster.
      correct("b", 1, 1.03, Verdict::ambiguous, 0.9, Verdict::ambiguous, 1),
      rejected("b", 1, ca::RejectionReason::value_mismatch),
      correct("c", 2, 9.0, Verdict::faster, 1.5, Verdict::faster, 3),
  };
  ca::BenchSample unfit = rejected("d", 2, ca::RejectionReason::task_unfit);
  unfit.scored = false;
  unfit.reward = 0;
  samples.push_back(unfit);
  samples[0].tokens = 1000;
  samples[0].cost = 0.5;
  samples[0].wall_seconds = 30;
  samples[3].tokens = 3000;
  samples[3].cost = 1.5;
  samples[3].wall_seconds = 90;
  return samples;
}

}  // namespace

TEST_CASE("a level's rates count confident verdicts over every scored sample") {
  const std::vector<ca::BenchSample> samples = run();
  const ca::TableRow one = ca::summarize_level(samples, 1);
  CHECK(one.samples == 4);
  CHECK(one.tasks == 2);
  CHECK(one.correct == 3);
  CHECK(one.pass_rate == Approx(0.75));
  CHECK(one.faster_than_eager_rate == Approx(0.25));
  CHECK(one.faster_than_compile_rate == Approx(0.25));
  CHECK(one.rewards.at(3) == 1);
  CHECK(one.rewards.at(1) == 2);
  CHECK(one.rewards.at(-1) == 1);
  CHECK(one.rejections.at("value_mismatch") == 1);
  // Per task: 4000 tokens, 2.0 spent, 120 s over tasks a and b.
  CHECK(one.tokens_per_task == Approx(2000));
  CHECK(one.cost_per_task == Approx(1.0));
  CHECK(one.wall_seconds_per_task == Approx(60));
}

TEST_CASE("geometric means over solved samples and over all with failures as 1x") {
  const ca::TableRow one = ca::summarize_level(run(), 1);
  // Eager: solved (4 * 1 * 1.03)^(1/3); all (4 * 1 * 1.03 * 1)^(1/4).
  REQUIRE(one.geomean_speedup_eager_solved);
  CHECK(*one.geomean_speedup_eager_solved == Approx(std::cbrt(4.12)));
  REQUIRE(one.geomean_speedup_eager_all);
  CHECK(*one.geomean_speedup_eager_all == Approx(std::pow(4.12, 0.25)));
  // Compile: solved (2 * 0.5 * 0.9)^(1/3) = 0.9^(1/3); all 0.9^(1/4).
  CHECK(*one.geomean_speedup_compile_solved == Approx(std::cbrt(0.9)));
  CHECK(*one.geomean_speedup_compile_all == Approx(std::pow(0.9, 0.25)));
}

TEST_CASE("fast_p counts correct samples strictly above p over every scored sample") {
  const ca::TableRow one = ca::summarize_level(run(), 1);
  // Eager speedups of correct samples: 4, 1, 1.03; one failure; 4 samples.
  CHECK(one.fast_p_eager.at(0.0) == Approx(0.75));
  CHECK(one.fast_p_eager.at(0.5) == Approx(0.75));
  CHECK(one.fast_p_eager.at(0.8) == Approx(0.75));
  CHECK(one.fast_p_eager.at(1.0) == Approx(0.5));  // 1.0 itself is not above 1
  CHECK(one.fast_p_eager.at(1.5) == Approx(0.25));
  CHECK(one.fast_p_eager.at(2.0) == Approx(0.25));
  // Compile: 2, 0.5, 0.9.
  CHECK(one.fast_p_compile.at(0.5) == Approx(0.5));
  CHECK(one.fast_p_compile.at(0.8) == Approx(0.5));
  CHECK(one.fast_p_compile.at(1.0) == Approx(0.25));
  CHECK(one.fast_p_compile.at(2.0) == Approx(0.0));
}

TEST_CASE("Table 1 has a row per level and one for the run; unfit tasks count nowhere") {
  const std::vector<ca::TableRow> table = ca::table_one(run());
  REQUIRE(table.size() == 3);
  CHECK(table[0].level == 1);
  CHECK(table[1].level == 2);
  CHECK(table[2].level == 0);
  const ca::TableRow& two = table[1];
  CHECK(two.samples == 1);
  CHECK(two.tasks == 2);  // the unfit task still costs what it cost
  CHECK(two.pass_rate == Approx(1.0));
  CHECK(*two.geomean_speedup_eager_solved == Approx(9.0));
  const ca::TableRow& all = table[2];
  CHECK(all.samples == 5);
  CHECK(all.pass_rate == Approx(0.8));
  CHECK(all.faster_than_eager_rate == Approx(0.4));
  CHECK(*all.geomean_speedup_eager_all == Approx(std::pow(4.0 * 1.0 * 1.03 * 9.0, 0.2)));
}

TEST_CASE("no solved sample leaves the solved means empty; no sample leaves every mean empty") {
  const std::vector<ca::BenchSample> failed = {rejected("a", 1, ca::RejectionReason::compile_error)};
  const ca::TableRow row = ca::summarize_level(failed, 0);
  CHECK_FALSE(row.geomean_speedup_eager_solved);
  REQUIRE(row.geomean_speedup_eager_all);
  CHECK(*row.geomean_speedup_eager_all == Approx(1.0));
  const ca::TableRow empty = ca::summarize_level({}, 0);
  CHECK(empty.samples == 0);
  CHECK_FALSE(empty.geomean_speedup_eager_all);
  CHECK(empty.pass_rate == 0);
}

TEST_CASE("the JSON row names its conventions and writes p as a reader would") {
  const nlohmann::json row = ca::table_one(run()).back();
  CHECK(row.at("level") == "all");
  CHECK(row.at("fast_p").at("eager").contains("0.5"));
  CHECK(row.at("fast_p").at("eager").contains("1"));
  CHECK(row.at("rewards").at("-1") == 1);
  CHECK(row.at("geomean_speedup").at("compile").contains("all_failures_as_1x"));
  CHECK(row.at("per_task").at("tokens").get<double>() == Approx(1000));  // 4000 over four tasks
}
