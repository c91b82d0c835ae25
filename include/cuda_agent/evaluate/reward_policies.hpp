// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The shipped reward policies: the CUDA Agent paper's milestone reward and the raw-speedup
/// reward of its ablation. Both satisfy `RewardPolicy` (reward_policy.hpp); a host writes
/// its own the same way (examples/05_custom_reward_policy shows one).

#include <cmath>        // isfinite
#include <limits>       // numeric_limits
#include <optional>     // optional
#include <sstream>      // ostringstream
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/reward_policy.hpp"

namespace cuda_agent {

namespace detail {

/// "1.23x [1.19, 1.27] FASTER than compile (threshold 5%)".
inline std::string describe_speedup(const SpeedupEstimate& estimate) {
  std::ostringstream text;
  text.precision(3);
  text << estimate.speedup << "x [" << estimate.interval_low << ", " << estimate.interval_high << "] "
       << to_string(estimate.verdict) << " against " << estimate.baseline << " (threshold " << estimate.threshold * 100
       << "%)";
  return text.str();
}

/// The reward of an evaluation that says nothing about its candidate (the task is unfit
/// to be scored): value 0, label "unscored". It is no verdict, neither success nor
/// failure; a trainer skips the sample.
inline Reward unscored(const Evaluation& evaluation) {
  const std::optional<Rejection> rejection = evaluation.rejection();
  return {0, std::string(Reward::unscored_label),
          "not scored: " + (rejection ? rejection->message : std::string("the task is unfit to be scored"))};
}

/// The reason an evaluation earns the failure reward, or nothing if it is correct.
inline std::optional<std::string> failure_of(const Evaluation& evaluation) {
  if (evaluation.correct()) return std::nullopt;
  if (const std::optional<Rejection> rejection = evaluation.rejection())
    return std::string(to_string(rejection->reason)) + ": " + rejection->message;
  return std::string("not verified");
}

/// Why a profile earns no speed reward: what its profiler wrote ("unrewardable"), else host
/// timers (the only reason before profilers said so).
inline std::string why_unrewardable(const ProfileResult& profile) {
  const auto written = profile.details.find("unrewardable");
  if (written != profile.details.end() && written->is_string()) return written->get<std::string>();
  return "measured with host timers, which earn no speed reward";
}
}  // namespace detail

/// The paper's reward (CUDA Agent, arXiv 2602.24286):
///
///   -1  the candidate did not compile, or is incorrect (including outputs found wrong
///       while it was being timed)
///    1  correct
///    2  correct and FASTER than eager PyTorch
///    3  correct and FASTER than both eager PyTorch and torch.compile
///
/// and, outside the scale, 0 labelled "unscored" when the task is unfit to be scored
/// (`Evaluation::scored()` is false): no verdict on the candidate, a sample to skip.
///
/// "FASTER" is the profiler's verdict: the whole confidence interval of the speedup clears
/// the threshold (5% by default), so SAME, SLOWER and AMBIGUOUS never earn a step, and
/// beating torch.compile without beating eager earns no step either (the paper orders the
/// milestones). A correct candidate that was not profiled earns 1, and so does one whose
/// profile is not `rewardable` (timed with host timers on a CPU, or a speed the trusted clock
/// could not prove).
class MilestoneReward {
 public:
  [[nodiscard]] std::string_view name() const noexcept { return "milestone"; }

  [[nodiscard]] Reward reward(const Evaluation& evaluation) const {
    if (!evaluation.scored()) return detail::unscored(evaluation);
    if (const std::optional<std::string> failure = detail::failure_of(evaluation)) {
      const bool built = evaluation.compile.succeeded;
      return {-1, built ? "incorrect" : "compile_error", *failure};
    }
    const ProfileResult* profile = evaluation.profile ? &*evaluation.profile : nullptr;
    if (profile == nullptr || !profile->versus_eager)
      return {1, "correct", "correct; no timing against eager, so no speed milestone"};
    if (!profile->rewardable)
      return {
          1, "correct",
          "correct; " + detail::describe_speedup(*profile->versus_eager) + "; " + detail::why_unrewardable(*profile)};
    const SpeedupEstimate& eager = *profile->versus_eager;
    if (eager.verdict != Verdict::faster) return {1, "correct", "correct; " + detail::describe_speedup(eager)};
    if (!profile->versus_compile)
      return {2, "faster_than_eager", detail::describe_speedup(eager) + "; no timing against compile"};
    const SpeedupEstimate& compiled = *profile->versus_compile;
    if (compiled.verdict != Verdict::faster)
      return {2, "faster_than_eager", detail::describe_speedup(eager) + "; " + detail::describe_speedup(compiled)};
    return {3, "faster_than_compile", detail::describe_speedup(eager) + "; " + detail::describe_speedup(compiled)};
  }
};

/// The raw speedup as the reward (the paper's ablation of its milestone reward): the
/// point estimate of baseline time over candidate time, against "compile" by default.
/// It ignores the verdict, so noise flows straight into the reward; that is the point of
/// the ablation. Failures earn `failure_value` (-1); a correct candidate without the
/// chosen timing, or timed where timings earn no reward (`ProfileResult::rewardable`),
/// earns `unmeasured_value` (1, parity). `maximum` caps outliers. A task
/// unfit to be scored earns 0 labelled "unscored", as in `MilestoneReward`.
class SpeedupReward {
 public:
  struct Options {
    /// "compile" or "eager".
    std::string baseline = "compile";
    double failure_value = -1;
    double unmeasured_value = 1;
    double maximum = std::numeric_limits<double>::infinity();
  };

  SpeedupReward() = default;
  explicit SpeedupReward(Options options) : options_(std::move(options)) {}

  [[nodiscard]] std::string_view name() const noexcept { return "speedup"; }
  [[nodiscard]] const Options& options() const noexcept { return options_; }

  [[nodiscard]] Reward reward(const Evaluation& evaluation) const {
    if (!evaluation.scored()) return detail::unscored(evaluation);
    if (const std::optional<std::string> failure = detail::failure_of(evaluation))
      return {options_.failure_value, evaluation.compile.succeeded ? "incorrect" : "compile_error", *failure};
    const SpeedupEstimate* estimate = nullptr;
    if (evaluation.profile && !evaluation.profile->rewardable)
      return {options_.unmeasured_value, "correct_unmeasured",
              "correct; " + detail::why_unrewardable(*evaluation.profile)};
    if (evaluation.profile) {
      const std::optional<SpeedupEstimate>& chosen =
          options_.baseline == "eager" ? evaluation.profile->versus_eager : evaluation.profile->versus_compile;
      if (chosen) estimate = &*chosen;
    }
    if (estimate == nullptr || !std::isfinite(estimate->speedup) || estimate->speedup <= 0)
      return {options_.unmeasured_value, "correct_unmeasured", "correct; no timing against " + options_.baseline};
    const double value = estimate->speedup < options_.maximum ? estimate->speedup : options_.maximum;
    return {value, "speedup", detail::describe_speedup(*estimate)};
  }

 private:
  Options options_;
};

static_assert(RewardPolicy<MilestoneReward>);
static_assert(RewardPolicy<SpeedupReward>);

}  // namespace cuda_agent
