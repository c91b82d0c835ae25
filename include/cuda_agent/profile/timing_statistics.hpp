// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Statistics behind the profiler's verdicts: per-contender summaries (median, quartiles,
/// sample count), the speedup as a ratio of medians with a bootstrap confidence interval,
/// and the verdict FASTER / SLOWER / SAME / AMBIGUOUS against a threshold.
///
/// The verdict rule, for a threshold t (default 0.05) and a speedup interval [low, high]
/// where speedup = baseline time / candidate time:
///
///   FASTER     low  >= 1 / (1 - t)   the candidate's time is at most (1 - t) x the baseline's
///                                    everywhere in the interval
///   SLOWER     high <= 1 - t         the candidate's time is at least baseline / (1 - t)
///                                    everywhere in the interval (the mirror image in log space)
///   SAME       1 - t < low and high < 1 / (1 - t): the whole interval lies within the threshold
///   AMBIGUOUS  anything else: the interval straddles a boundary (or there is no interval)
///
/// Intervals come from a percentile bootstrap with a seeded generator, so the same samples
/// and seed always give the same interval and verdict; for paired rounds they are widened
/// to cover the order-statistic (sign-test) interval of the median per-round ratio, which
/// holds whatever the noise looks like. Sampling noise is not the only error
/// of a GPU timing protocol (order effects and clock drift add a few percent that no number
/// of samples averages away), so every interval is widened to at least
/// `SpeedupOptions::minimum_half_width` either side of the point estimate (in log space).

#include <algorithm>  // sort, nth_element, min, max
#include <cmath>      // log, exp, isfinite
#include <cstddef>    // size_t
#include <cstdint>    // uint64_t
#include <limits>     // numeric_limits
#include <span>       // span
#include <stdexcept>  // invalid_argument
#include <string>     // string
#include <utility>    // move, pair
#include <vector>     // vector

#include "cuda_agent/evaluation.hpp"

namespace cuda_agent {

// ---------------------------------------------------------------------------------------
// Summaries

/// The p-quantile (0 <= p <= 1) of already sorted values, interpolating linearly between
/// order statistics (the "type 7" rule of R and numpy's default). NaN when empty.
[[nodiscard]] inline double sorted_quantile(std::span<const double> sorted, double p) noexcept {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  p = std::clamp(p, 0.0, 1.0);
  const double position = p * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(position);
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + fraction * (sorted[above] - sorted[below]);
}

/// The p-quantile of unsorted values.
[[nodiscard]] inline double quantile(std::span<const double> values, double p) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted_quantile(sorted, p);
}

[[nodiscard]] inline double median(std::span<const double> values) { return quantile(values, 0.5); }

/// Median, mean, extremes and quartiles of one contender's samples (microseconds per call).
/// `discarded` counts samples that were taken but left out (throttled clocks).
[[nodiscard]] inline TimingStats summarize_timings(std::string contender, std::span<const double> samples_us,
                                                   std::size_t discarded = 0) {
  TimingStats stats;
  stats.contender = std::move(contender);
  stats.samples = samples_us.size();
  stats.discarded = discarded;
  if (samples_us.empty()) return stats;
  std::vector<double> sorted(samples_us.begin(), samples_us.end());
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double value : sorted) sum += value;
  stats.median_us = sorted_quantile(sorted, 0.5);
  stats.mean_us = sum / static_cast<double>(sorted.size());
  stats.min_us = sorted.front();
  stats.max_us = sorted.back();
  stats.q1_us = sorted_quantile(sorted, 0.25);
  stats.q3_us = sorted_quantile(sorted, 0.75);
  return stats;
}

// ---------------------------------------------------------------------------------------
// A small deterministic generator: results must not depend on the standard library's
// distributions, which differ between implementations.

/// xoshiro256** seeded through splitmix64 (Blackman and Vigna). Same seed, same sequence,
/// on every platform.
class SeededGenerator {
 public:
  explicit SeededGenerator(std::uint64_t seed) noexcept {
    for (std::uint64_t& word : state_) {
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t mixed = seed;
      mixed = (mixed ^ (mixed >> 30)) * 0xbf58476d1ce4e5b9ULL;
      mixed = (mixed ^ (mixed >> 27)) * 0x94d049bb133111ebULL;
      word = mixed ^ (mixed >> 31);
    }
  }

  [[nodiscard]] std::uint64_t next() noexcept {
    const std::uint64_t result = rotate_left(state_[1] * 5, 7) * 9;
    const std::uint64_t shifted = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= shifted;
    state_[3] = rotate_left(state_[3], 45);
    return result;
  }

  /// Uniform in [0, bound), without modulo bias. `bound` must be positive.
  [[nodiscard]] std::size_t below(std::size_t bound) noexcept {
    const auto range = static_cast<std::uint64_t>(bound);
    const std::uint64_t rejected = (0 - range) % range;  // 2^64 mod range
    std::uint64_t draw = next();
    while (draw < rejected) draw = next();
    return static_cast<std::size_t>(draw % range);
  }

 private:
  static constexpr std::uint64_t rotate_left(std::uint64_t value, int bits) noexcept {
    return (value << bits) | (value >> (64 - bits));
  }
  std::uint64_t state_[4]{};
};

// ---------------------------------------------------------------------------------------
// Speedups and verdicts

/// How a speedup interval is computed and judged.
struct SpeedupOptions {
  /// FASTER needs the candidate's time at most (1 - threshold) x the baseline's.
  double threshold = 0.05;
  /// Two-sided coverage of the interval.
  double confidence = 0.95;
  /// Bootstrap resamples; 2000 puts the Monte-Carlo error of a 95% bound well under 0.5%.
  std::size_t resamples = 2000;
  /// Same samples, same seed: same interval and verdict.
  std::uint64_t seed = 0x6375'6461'6167'656eULL;
  /// The interval is at least this wide either side of the point estimate, in log space
  /// (0.01: about [s / 1.01, s x 1.01]). It stands for the protocol error that resampling cannot
  /// see: interleaved A/A comparisons on an H200 differed by up to 1.5% between sessions.
  double minimum_half_width = 0.01;
};

/// The bounds a speedup must clear, for a threshold t.
[[nodiscard]] constexpr double faster_bound(double threshold) noexcept { return 1.0 / (1.0 - threshold); }
[[nodiscard]] constexpr double slower_bound(double threshold) noexcept { return 1.0 - threshold; }

/// The verdict for a speedup interval [low, high] (see the file comment for the rule).
[[nodiscard]] constexpr Verdict classify_speedup(double low, double high, double threshold) noexcept {
  // Written so that NaN bounds fall through to AMBIGUOUS.
  if (!(low > 0) || !(high >= low) || !(threshold > 0 && threshold < 1)) return Verdict::ambiguous;
  if (low >= faster_bound(threshold)) return Verdict::faster;
  if (high <= slower_bound(threshold)) return Verdict::slower;
  if (low > slower_bound(threshold) && high < faster_bound(threshold)) return Verdict::same;
  return Verdict::ambiguous;
}

/// Whether the i-th samples of numerator and denominator were taken together (in the same
/// interleaved round, so that drift common to both cancels) or independently.
enum class SamplePairing { paired, independent };

/// One factor median(numerator) / median(denominator) of a speedup. A direct comparison
/// is one factor (baseline over candidate); a comparison through a cached baseline is a
/// chain of two: cached baseline over cached anchor, times live anchor over candidate.
struct RatioOfMedians {
  std::span<const double> numerator;
  std::span<const double> denominator;
  SamplePairing pairing = SamplePairing::paired;
};

namespace detail {

inline void require_usable(const RatioOfMedians& factor) {
  if (factor.numerator.empty() || factor.denominator.empty())
    throw std::invalid_argument("speedup estimate: a contender has no samples");
  if (factor.pairing == SamplePairing::paired && factor.numerator.size() != factor.denominator.size())
    throw std::invalid_argument("speedup estimate: paired samples need the same count on both sides (got " +
                                std::to_string(factor.numerator.size()) + " and " +
                                std::to_string(factor.denominator.size()) + ")");
  for (std::span<const double> side : {factor.numerator, factor.denominator})
    for (double value : side)
      if (!(value > 0) || !std::isfinite(value))
        throw std::invalid_argument("speedup estimate: samples must be positive and finite (got " +
                                    std::to_string(value) + ")");
}

/// Median of `values` at `indices`, using `scratch` as work space.
inline double median_at(std::span<const double> values, std::span<const std::size_t> indices,
                        std::vector<double>& scratch) {
  scratch.clear();
  for (std::size_t index : indices) scratch.push_back(values[index]);
  const std::size_t middle = scratch.size() / 2;
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(middle), scratch.end());
  const double upper = scratch[middle];
  if (scratch.size() % 2 == 1) return upper;
  const double lower = *std::max_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(middle));
  return (lower + upper) / 2;
}

inline void draw_indices(SeededGenerator& generator, std::size_t count, std::vector<std::size_t>& out) {
  out.resize(count);
  for (std::size_t& index : out) index = generator.below(count);
}

/// The distribution-free interval [x(k), x(n-k+1)] for the median of the per-round log
/// ratios of a paired factor: k is the largest rank whose two-sided binomial coverage is at
/// least `confidence` (k = 1, the extremes, when too few rounds reach it). It makes no
/// assumption about the shape of the noise, where the percentile bootstrap of a median
/// covers too little with few rounds and heavy tails (one disturbed sample in five).
inline std::pair<double, double> paired_log_ratio_interval(const RatioOfMedians& factor, double confidence) {
  std::vector<double> logs;
  logs.reserve(factor.numerator.size());
  for (std::size_t i = 0; i < factor.numerator.size(); ++i)
    logs.push_back(std::log(factor.numerator[i] / factor.denominator[i]));
  std::sort(logs.begin(), logs.end());
  const std::size_t n = logs.size();
  // P(B <= j) for B ~ Binomial(n, 1/2), accumulated in log space (n may be large).
  std::size_t rank = 1;
  double cumulative = 0;
  for (std::size_t j = 0; 2 * (j + 1) <= n; ++j) {
    const double log_choose = std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(j) + 1) -
                              std::lgamma(static_cast<double>(n - j) + 1);
    cumulative += std::exp(log_choose - static_cast<double>(n) * std::log(2.0));
    if (2 * cumulative > 1 - confidence) break;
    rank = j + 1;  // [x(j+1), x(n-j)] covers the median with probability 1 - 2 P(B <= j)
  }
  return {logs[rank - 1], logs[n - rank]};
}

}  // namespace detail

/// The speedup given by a chain of ratio-of-medians factors (their product), with a
/// percentile-bootstrap interval (each factor resampled on its own; paired factors resample
/// rounds, so both sides of a round stay together) and the verdict for `options.threshold`.
/// Throws `std::invalid_argument` for empty, mismatched or non-positive samples.
[[nodiscard]] inline SpeedupEstimate estimate_speedup(std::string baseline, std::span<const RatioOfMedians> chain,
                                                      const SpeedupOptions& options = {}) {
  if (chain.empty()) throw std::invalid_argument("speedup estimate: no ratio to estimate");
  if (!(options.confidence > 0 && options.confidence < 1))
    throw std::invalid_argument("speedup estimate: confidence must lie in (0, 1)");
  if (!(options.threshold > 0 && options.threshold < 1))
    throw std::invalid_argument("speedup estimate: threshold must lie in (0, 1)");
  for (const RatioOfMedians& factor : chain) detail::require_usable(factor);

  SpeedupEstimate estimate;
  estimate.baseline = std::move(baseline);
  estimate.confidence = options.confidence;
  estimate.threshold = options.threshold;

  double log_speedup = 0;
  for (const RatioOfMedians& factor : chain)
    log_speedup += std::log(median(factor.numerator) / median(factor.denominator));
  estimate.speedup = std::exp(log_speedup);

  double low = estimate.speedup;
  double high = estimate.speedup;
  if (options.resamples > 0) {
    SeededGenerator generator(options.seed);
    std::vector<double> replicates;
    replicates.reserve(options.resamples);
    std::vector<std::size_t> numerator_indices;
    std::vector<std::size_t> denominator_indices;
    std::vector<double> scratch;
    for (std::size_t replicate = 0; replicate < options.resamples; ++replicate) {
      double log_replicate = 0;
      for (const RatioOfMedians& factor : chain) {
        detail::draw_indices(generator, factor.numerator.size(), numerator_indices);
        if (factor.pairing == SamplePairing::paired)
          denominator_indices = numerator_indices;
        else
          detail::draw_indices(generator, factor.denominator.size(), denominator_indices);
        log_replicate += std::log(detail::median_at(factor.numerator, numerator_indices, scratch) /
                                  detail::median_at(factor.denominator, denominator_indices, scratch));
      }
      replicates.push_back(log_replicate);
    }
    std::sort(replicates.begin(), replicates.end());
    const double tail = (1 - options.confidence) / 2;
    low = std::exp(sorted_quantile(replicates, tail));
    high = std::exp(sorted_quantile(replicates, 1 - tail));
  }
  // Each paired factor's distribution-free interval, with the other factors at their point
  // estimates, joins the bootstrap interval: the wider of the two decides.
  for (const RatioOfMedians& factor : chain) {
    if (factor.pairing != SamplePairing::paired) continue;
    const auto [log_low, log_high] = detail::paired_log_ratio_interval(factor, options.confidence);
    const double others = log_speedup - std::log(median(factor.numerator) / median(factor.denominator));
    low = std::min(low, std::exp(others + log_low));
    high = std::max(high, std::exp(others + log_high));
  }
  const double margin = std::exp(std::max(0.0, options.minimum_half_width));
  estimate.interval_low = std::min(low, estimate.speedup / margin);
  estimate.interval_high = std::max(high, estimate.speedup * margin);
  estimate.verdict = classify_speedup(estimate.interval_low, estimate.interval_high, options.threshold);
  return estimate;
}

/// A speedup reached through a cached baseline (cached baseline over cached anchor, times
/// live anchor over candidate) assumes that the baseline moved between the cached session
/// and this one exactly as the anchor did. Nothing guarantees it: a clock or power change
/// moves a latency-bound anchor (a slow eager kernel) and a bandwidth-bound baseline (its
/// compiled form) unequally. `anchor_drift` is the live anchor's median over its cached
/// median; the interval is widened to also hold the estimate for a baseline that did not
/// move at all (the same interval divided by the drift), and the verdict is redone. A
/// drift of 1 leaves the estimate as it was.
[[nodiscard]] inline SpeedupEstimate widen_for_anchor_drift(SpeedupEstimate estimate, double anchor_drift) {
  if (!(anchor_drift > 0) || !std::isfinite(anchor_drift))
    throw std::invalid_argument("speedup estimate: the anchor's drift must be positive and finite (got " +
                                std::to_string(anchor_drift) + ")");
  estimate.interval_low = std::min(estimate.interval_low, estimate.interval_low / anchor_drift);
  estimate.interval_high = std::max(estimate.interval_high, estimate.interval_high / anchor_drift);
  estimate.verdict = classify_speedup(estimate.interval_low, estimate.interval_high, estimate.threshold);
  return estimate;
}

/// The common case: one baseline against the candidate.
[[nodiscard]] inline SpeedupEstimate estimate_speedup(std::string baseline, std::span<const double> baseline_us,
                                                      std::span<const double> candidate_us,
                                                      SamplePairing pairing = SamplePairing::paired,
                                                      const SpeedupOptions& options = {}) {
  const RatioOfMedians factor{baseline_us, candidate_us, pairing};
  return estimate_speedup(std::move(baseline), std::span<const RatioOfMedians>(&factor, 1), options);
}

}  // namespace cuda_agent
