// SPDX-License-Identifier: Apache-2.0
// Summaries, the seeded generator, the verdict rule, and speedup intervals on synthetic
// timing distributions, including A/A comparisons that must never come out FASTER or SLOWER.
#include "catch.hpp"

#include <cuda_agent/profile/timing_statistics.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace ca = cuda_agent;

namespace {

/// Draws timing-like samples: a base time with multiplicative log-normal noise, and a
/// share of outliers (preemption, clock dips) that are `outlier_factor` times slower.
struct NoiseModel {
  double relative_sigma = 0.02;
  double outlier_share = 0.0;
  double outlier_factor = 1.5;
};

class SyntheticTimer {
 public:
  explicit SyntheticTimer(std::uint64_t seed) : engine_(seed) {}

  double sample(double base_us, const NoiseModel& noise) {
    std::normal_distribution<double> gaussian(0.0, noise.relative_sigma);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    double value = base_us * std::exp(gaussian(engine_));
    if (uniform(engine_) < noise.outlier_share) value *= noise.outlier_factor;
    return value;
  }

  std::vector<double> samples(std::size_t count, double base_us, const NoiseModel& noise) {
    std::vector<double> out;
    for (std::size_t i = 0; i < count; ++i) out.push_back(sample(base_us, noise));
    return out;
  }

 private:
  std::mt19937_64 engine_;
};

ca::SpeedupOptions fast_options(std::uint64_t seed = 1, std::size_t resamples = 1000) {
  ca::SpeedupOptions options;
  options.resamples = resamples;
  options.seed = seed;
  return options;
}

}  // namespace

TEST_CASE("quantiles interpolate between order statistics like numpy's default", "[profiling]") {
  const std::vector<double> values{4, 1, 3, 2};
  CHECK(ca::median(values) == Approx(2.5));
  CHECK(ca::quantile(values, 0.25) == Approx(1.75));
  CHECK(ca::quantile(values, 0.75) == Approx(3.25));
  CHECK(ca::quantile(values, 0.0) == Approx(1));
  CHECK(ca::quantile(values, 1.0) == Approx(4));
  CHECK(ca::median(std::vector<double>{7}) == Approx(7));
  CHECK(std::isnan(ca::median(std::vector<double>{})));
}

TEST_CASE("a summary reports median, quartiles, extremes, mean and counts", "[profiling]") {
  const std::vector<double> samples{10, 12, 11, 30, 9};
  const ca::TimingStats stats = ca::summarize_timings("candidate", samples, 2);
  CHECK(stats.contender == "candidate");
  CHECK(stats.samples == 5);
  CHECK(stats.discarded == 2);
  CHECK(stats.median_us == Approx(11));
  CHECK(stats.min_us == Approx(9));
  CHECK(stats.max_us == Approx(30));
  CHECK(stats.mean_us == Approx(14.4));
  CHECK(stats.q1_us == Approx(10));
  CHECK(stats.q3_us == Approx(12));

  const ca::TimingStats empty = ca::summarize_timings("eager", std::vector<double>{});
  CHECK(empty.samples == 0);
  CHECK(empty.median_us == 0);
}

TEST_CASE("the seeded generator is reproducible and draws indices uniformly", "[profiling]") {
  ca::SeededGenerator first(42), second(42), other(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t a = first.next();
    CHECK(a == second.next());
    differs = differs || a != other.next();
  }
  CHECK(differs);

  ca::SeededGenerator generator(7);
  std::array<int, 7> counts{};
  const int draws = 70000;
  for (int i = 0; i < draws; ++i) {
    const std::size_t index = generator.below(7);
    REQUIRE(index < 7);
    ++counts[index];
  }
  for (int count : counts) CHECK(std::abs(count - draws / 7) < 500);  // about 5 standard deviations
}

TEST_CASE("the verdict rule: FASTER only when the whole interval clears the threshold", "[profiling]") {
  const double t = 0.05;
  const double faster = ca::faster_bound(t);  // 1 / 0.95 = 1.0526...
  const double slower = ca::slower_bound(t);  // 0.95
  CHECK(faster == Approx(1.0 / 0.95));
  CHECK(slower == Approx(0.95));

  CHECK(ca::classify_speedup(faster, 1.3, t) == ca::Verdict::faster);
  CHECK(ca::classify_speedup(1.2, 1.3, t) == ca::Verdict::faster);
  // 5% faster in speedup terms is not 5% less time: 1/1.05 = 0.952 > 0.95.
  CHECK(ca::classify_speedup(1.05, 1.3, t) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(0.99, 1.5, t) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(0.97, 1.03, t) == ca::Verdict::same);
  CHECK(ca::classify_speedup(slower, 1.03, t) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(0.8, slower, t) == ca::Verdict::slower);
  CHECK(ca::classify_speedup(0.8, 0.96, t) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(0.5, 2.0, t) == ca::Verdict::ambiguous);
  // A 10% threshold moves both bounds.
  CHECK(ca::classify_speedup(1.08, 1.2, 0.10) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(1.12, 1.2, 0.10) == ca::Verdict::faster);
  // Degenerate input never claims anything.
  CHECK(ca::classify_speedup(std::nan(""), 2.0, t) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(1.3, 1.2, t) == ca::Verdict::ambiguous);
  CHECK(ca::classify_speedup(1.2, 1.3, 0.0) == ca::Verdict::ambiguous);
}

TEST_CASE("clear differences are judged FASTER, SLOWER and SAME", "[profiling]") {
  SyntheticTimer timer(2024);
  const NoiseModel noise{0.02, 0.0, 1.0};
  const auto baseline = timer.samples(30, 1000, noise);

  const auto quicker = timer.samples(30, 800, noise);
  const ca::SpeedupEstimate faster =
      ca::estimate_speedup("eager", baseline, quicker, ca::SamplePairing::paired, fast_options());
  CHECK(faster.speedup == Approx(1.25).epsilon(0.03));
  CHECK(faster.interval_low <= faster.speedup);
  CHECK(faster.interval_high >= faster.speedup);
  CHECK(faster.verdict == ca::Verdict::faster);
  CHECK(faster.baseline == "eager");

  const auto slowest = timer.samples(30, 1300, noise);
  CHECK(ca::estimate_speedup("eager", baseline, slowest, ca::SamplePairing::paired, fast_options()).verdict ==
        ca::Verdict::slower);

  const auto equal = timer.samples(30, 1000, {0.005, 0.0, 1.0});
  const auto baseline_quiet = timer.samples(30, 1000, {0.005, 0.0, 1.0});
  CHECK(ca::estimate_speedup("eager", baseline_quiet, equal, ca::SamplePairing::paired, fast_options()).verdict ==
        ca::Verdict::same);

  // Truly 5.5% less time, but the noise does not let the interval clear 1.0526.
  const auto marginal = timer.samples(12, 945, {0.05, 0.0, 1.0});
  const auto baseline_noisy = timer.samples(12, 1000, {0.05, 0.0, 1.0});
  CHECK(ca::estimate_speedup("eager", baseline_noisy, marginal, ca::SamplePairing::paired, fast_options()).verdict ==
        ca::Verdict::ambiguous);
}

TEST_CASE("intervals are reproducible for a seed and never narrower than the protocol floor", "[profiling]") {
  SyntheticTimer timer(5);
  const auto a = timer.samples(25, 100, {});
  const auto b = timer.samples(25, 90, {});
  const auto first = ca::estimate_speedup("compile", a, b, ca::SamplePairing::paired, fast_options(9));
  const auto again = ca::estimate_speedup("compile", a, b, ca::SamplePairing::paired, fast_options(9));
  CHECK(first.interval_low == again.interval_low);
  CHECK(first.interval_high == again.interval_high);
  CHECK(first.verdict == again.verdict);

  // Identical constant samples: resampling sees no spread, the floor still applies.
  const std::vector<double> constant(20, 50.0);
  const auto floor = ca::estimate_speedup("eager", constant, constant, ca::SamplePairing::paired, fast_options());
  CHECK(floor.speedup == Approx(1.0));
  CHECK(floor.interval_low == Approx(std::exp(-0.01)));
  CHECK(floor.interval_high == Approx(std::exp(0.01)));
  CHECK(floor.verdict == ca::Verdict::same);

  ca::SpeedupOptions wide = fast_options();
  wide.minimum_half_width = 0.06;  // wider than the threshold: nothing can be decided
  CHECK(ca::estimate_speedup("eager", constant, constant, ca::SamplePairing::paired, wide).verdict ==
        ca::Verdict::ambiguous);
}

TEST_CASE("A/A comparisons are never FASTER or SLOWER, whatever the noise", "[profiling]") {
  struct Scenario {
    const char* name;
    NoiseModel noise;
    std::size_t rounds;
    double drift_per_round;  // shared by both contenders of a round (power-cap drift)
  };
  const std::vector<Scenario> scenarios{
      {"quiet", {0.005, 0.0, 1.0}, 20, 0.0},
      {"typical", {0.02, 0.0, 1.0}, 20, 0.0},
      {"noisy", {0.05, 0.0, 1.0}, 30, 0.0},
      {"outliers", {0.02, 0.10, 1.6}, 20, 0.0},
      {"heavy outliers", {0.03, 0.25, 2.0}, 40, 0.0},
      {"drifting clock", {0.02, 0.0, 1.0}, 30, 0.003},  // +9% over the session
  };
  for (const Scenario& scenario : scenarios) {
    std::map<ca::Verdict, int> verdicts;
    SyntheticTimer timer(std::hash<std::string>{}(scenario.name));
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<double> a, b;
      for (std::size_t round = 0; round < scenario.rounds; ++round) {
        const double base = 200.0 * (1 + scenario.drift_per_round * static_cast<double>(round));
        a.push_back(timer.sample(base, scenario.noise));
        b.push_back(timer.sample(base, scenario.noise));
      }
      ++verdicts[ca::estimate_speedup("self", a, b, ca::SamplePairing::paired,
                                      fast_options(static_cast<std::uint64_t>(trial), 400))
                     .verdict];
    }
    INFO(scenario.name << ": SAME " << verdicts[ca::Verdict::same] << ", AMBIGUOUS "
                       << verdicts[ca::Verdict::ambiguous]);
    CHECK(verdicts[ca::Verdict::faster] == 0);
    CHECK(verdicts[ca::Verdict::slower] == 0);
    if (scenario.noise.relative_sigma <= 0.02 && scenario.noise.outlier_share == 0)
      CHECK(verdicts[ca::Verdict::same] >= 95);  // an honest comparison mostly decides
  }
}

TEST_CASE("pairing cancels drift that independent resampling cannot", "[profiling]") {
  SyntheticTimer timer(11);
  std::vector<double> baseline, candidate;
  for (int round = 0; round < 40; ++round) {
    const double drift = 1 + 0.01 * round;  // +40% across the session
    baseline.push_back(timer.sample(1000 * drift, {0.005, 0, 1}));
    candidate.push_back(timer.sample(850 * drift, {0.005, 0, 1}));
  }
  const auto paired = ca::estimate_speedup("eager", baseline, candidate, ca::SamplePairing::paired, fast_options());
  const auto independent =
      ca::estimate_speedup("eager", baseline, candidate, ca::SamplePairing::independent, fast_options());
  CHECK(paired.verdict == ca::Verdict::faster);
  CHECK(paired.interval_high - paired.interval_low < independent.interval_high - independent.interval_low);
}

TEST_CASE("a speedup through a cached baseline multiplies the factors of the chain", "[profiling]") {
  SyntheticTimer timer(3);
  const NoiseModel noise{0.01, 0, 1};
  // Cached session: compile takes 0.8x eager's time. Live session: the clock is 10% slower
  // and the candidate takes 0.5x eager's time.
  const auto cached_eager = timer.samples(30, 1000, noise);
  const auto cached_compile = timer.samples(30, 800, noise);
  const auto live_eager = timer.samples(30, 1100, noise);
  const auto live_candidate = timer.samples(30, 550, noise);
  const std::array<ca::RatioOfMedians, 2> chain{
      ca::RatioOfMedians{cached_compile, cached_eager, ca::SamplePairing::paired},
      ca::RatioOfMedians{live_eager, live_candidate, ca::SamplePairing::paired}};
  const auto estimate = ca::estimate_speedup("compile", chain, fast_options());
  CHECK(estimate.speedup == Approx(1.6).epsilon(0.03));  // 0.8 x 2.0
  CHECK(estimate.verdict == ca::Verdict::faster);
  CHECK(estimate.baseline == "compile");
}

TEST_CASE("an anchor that drifted widens a cached speedup toward a baseline that stayed put", "[profiling]") {
  ca::SpeedupEstimate estimate;
  estimate.speedup = 0.90;
  estimate.interval_low = 0.88;
  estimate.interval_high = 0.93;
  estimate.verdict = ca::Verdict::slower;
  // Live eager ran 8% faster than when cached: had compile not moved with it, the speedup
  // would be 0.93 / 0.92 = 1.01 at the top, so SLOWER cannot be told.
  const auto widened = ca::widen_for_anchor_drift(estimate, 0.92);
  CHECK(widened.speedup == 0.90);
  CHECK(widened.interval_low == 0.88);
  CHECK(widened.interval_high == Approx(0.93 / 0.92));
  CHECK(widened.verdict == ca::Verdict::ambiguous);

  // Drift the other way widens the low end; no drift changes nothing.
  estimate.speedup = 1.20;
  estimate.interval_low = 1.15;
  estimate.interval_high = 1.25;
  estimate.verdict = ca::Verdict::faster;
  const auto slower_live = ca::widen_for_anchor_drift(estimate, 1.03);
  CHECK(slower_live.interval_low == Approx(1.15 / 1.03));
  CHECK(slower_live.interval_high == 1.25);
  CHECK(slower_live.verdict == ca::Verdict::faster);
  const auto unmoved = ca::widen_for_anchor_drift(estimate, 1.0);
  CHECK(unmoved.interval_low == 1.15);
  CHECK(unmoved.interval_high == 1.25);
  CHECK(unmoved.verdict == ca::Verdict::faster);

  CHECK_THROWS_AS(ca::widen_for_anchor_drift(estimate, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(ca::widen_for_anchor_drift(estimate, std::nan("")), std::invalid_argument);
}

TEST_CASE("unusable samples are refused with a reason", "[profiling]") {
  const std::vector<double> some{1, 2, 3};
  const std::vector<double> fewer{1, 2};
  const std::vector<double> none;
  const std::vector<double> negative{1, -2, 3};
  CHECK_THROWS_AS(ca::estimate_speedup("eager", some, none), std::invalid_argument);
  CHECK_THROWS_AS(ca::estimate_speedup("eager", some, fewer, ca::SamplePairing::paired), std::invalid_argument);
  CHECK_NOTHROW(ca::estimate_speedup("eager", some, fewer, ca::SamplePairing::independent, fast_options()));
  CHECK_THROWS_AS(ca::estimate_speedup("eager", some, negative), std::invalid_argument);
  ca::SpeedupOptions bad = fast_options();
  bad.threshold = 1.5;
  CHECK_THROWS_AS(ca::estimate_speedup("eager", some, some, ca::SamplePairing::paired, bad), std::invalid_argument);
}

TEST_CASE("few rounds with heavy-tailed disturbances rarely give an A/A verdict", "[profiling]") {
  // A preempted host or a contended device: any sample may come out 2 to 50 times slower.
  // With five to eight rounds the percentile bootstrap of a median covers too little; with
  // the distribution-free interval of the per-round ratios, a verdict needs every round (or
  // all but the binomial ranks) on one side, which noise of this kind rarely produces.
  std::mt19937_64 engine(20261129);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto disturbed = [&](double base) {
    double value = base * std::exp(0.01 * (uniform(engine) - 0.5));
    if (uniform(engine) < 0.35) value *= 2 + 48 * uniform(engine);
    return value;
  };
  std::map<ca::Verdict, int> verdicts;
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t rounds = 5 + static_cast<std::size_t>(trial % 4);
    std::vector<double> a, b;
    for (std::size_t round = 0; round < rounds; ++round) {
      a.push_back(disturbed(500));
      b.push_back(disturbed(500));
    }
    ++verdicts[ca::estimate_speedup("self", a, b, ca::SamplePairing::paired,
                                    fast_options(static_cast<std::uint64_t>(trial), 400))
                   .verdict];
  }
  INFO("FASTER " << verdicts[ca::Verdict::faster] << ", SLOWER " << verdicts[ca::Verdict::slower] << ", SAME "
                 << verdicts[ca::Verdict::same] << ", AMBIGUOUS " << verdicts[ca::Verdict::ambiguous]);
  CHECK(verdicts[ca::Verdict::faster] + verdicts[ca::Verdict::slower] <= 4);  // at most 1% of the trials
}

TEST_CASE("the per-round interval uses the binomial ranks of the median", "[profiling]") {
  // Ten paired rounds with ratios 1.10 ... 1.19 (sorted): the 95% ranks are the 2nd and 9th.
  std::vector<double> baseline, candidate;
  for (int round = 0; round < 10; ++round) {
    baseline.push_back(100.0 * (1.10 + 0.01 * round));
    candidate.push_back(100.0);
  }
  ca::SpeedupOptions options = fast_options();
  options.resamples = 0;           // the order-statistic interval alone
  options.minimum_half_width = 0;  // no protocol floor
  const auto estimate = ca::estimate_speedup("eager", baseline, candidate, ca::SamplePairing::paired, options);
  CHECK(estimate.interval_low == Approx(1.11));
  CHECK(estimate.interval_high == Approx(1.18));
  CHECK(estimate.verdict == ca::Verdict::faster);
  // Five rounds never reach 95%: the extremes are the best there is.
  const auto few = ca::estimate_speedup("eager", std::span(baseline).first(5), std::span(candidate).first(5),
                                        ca::SamplePairing::paired, options);
  CHECK(few.interval_low == Approx(1.10));
  CHECK(few.interval_high == Approx(1.14));
}
