// SPDX-License-Identifier: Apache-2.0
// A reward policy of one's own, next to the two shipped ones. Any type with `name()` and
// `reward(const Evaluation&) -> Reward` is a RewardPolicy; this one grades the speedup
// over torch.compile on a log scale, but only counts what the profiler is confident of:
// it uses the lower end of the speedup's confidence interval, and only on a FASTER verdict.
#include <cuda_agent/evaluate/reward_policies.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace ca = cuda_agent;

/// -1 when incorrect; otherwise 1 + log2 of the guaranteed speedup over torch.compile,
/// between 1 (no confident gain) and 4 (at least 8x faster, confidently).
class ConfidentLogSpeedupReward {
 public:
  [[nodiscard]] std::string_view name() const { return "confident-log-speedup"; }

  [[nodiscard]] ca::Reward reward(const ca::Evaluation& evaluation) const {
    if (!evaluation.correct()) {
      const auto rejection = evaluation.rejection();
      return {-1, "incorrect", rejection ? rejection->message : "not verified"};
    }
    if (!evaluation.profile || !evaluation.profile->versus_compile)
      return {1, "correct", "no timing against torch.compile"};
    const ca::SpeedupEstimate& compile = *evaluation.profile->versus_compile;
    if (compile.verdict != ca::Verdict::faster)
      return {1, "correct",
              std::string("not confidently faster than compile: ") + std::string(ca::to_string(compile.verdict))};
    const double guaranteed = compile.interval_low;  // the speedup the profiler vouches for
    const double value = 1 + std::clamp(std::log2(guaranteed), 0.0, 3.0);
    return {value, "faster_than_compile", "at least " + std::to_string(guaranteed) + "x faster than compile"};
  }
};

static_assert(ca::RewardPolicy<ConfidentLogSpeedupReward>);

namespace {

ca::Evaluation evaluation_with(double eager_speedup, ca::Verdict eager_verdict, double compile_speedup,
                               ca::Verdict compile_verdict, bool correct = true) {
  ca::Evaluation evaluation;
  evaluation.compile.succeeded = true;
  evaluation.verification = ca::VerificationResult{};
  evaluation.verification->correct = correct;
  if (!correct)
    evaluation.verification->rejection = ca::Rejection{ca::RejectionReason::value_mismatch, "wrong values", {}};
  evaluation.profile = ca::ProfileResult{};
  const auto estimate = [](const char* baseline, double speedup, ca::Verdict verdict) {
    ca::SpeedupEstimate result;
    result.baseline = baseline;
    result.speedup = speedup;
    result.interval_low = speedup / 1.03;
    result.interval_high = speedup * 1.03;
    result.verdict = verdict;
    return result;
  };
  evaluation.profile->versus_eager = estimate("eager", eager_speedup, eager_verdict);
  evaluation.profile->versus_compile = estimate("compile", compile_speedup, compile_verdict);
  return evaluation;
}

}  // namespace

int main() {
  struct Case {
    const char* what;
    ca::Evaluation evaluation;
  };
  const std::vector<Case> cases{
      {"wrong values", evaluation_with(3.0, ca::Verdict::faster, 2.5, ca::Verdict::faster, false)},
      {"correct, as fast as both", evaluation_with(1.01, ca::Verdict::same, 0.99, ca::Verdict::same)},
      {"4% faster: noise-level", evaluation_with(1.04, ca::Verdict::ambiguous, 1.04, ca::Verdict::ambiguous)},
      {"beats eager only", evaluation_with(1.6, ca::Verdict::faster, 0.9, ca::Verdict::slower)},
      {"beats both, 1.3x compile", evaluation_with(2.0, ca::Verdict::faster, 1.3, ca::Verdict::faster)},
      {"beats both, 6x compile", evaluation_with(9.0, ca::Verdict::faster, 6.0, ca::Verdict::faster)},
  };

  std::vector<ca::AnyRewardPolicy> policies;
  policies.emplace_back(ca::MilestoneReward{});
  policies.emplace_back(ca::SpeedupReward{});
  policies.emplace_back(ConfidentLogSpeedupReward{});

  std::cout << std::left << std::setw(28) << "evaluation";
  for (const auto& policy : policies) std::cout << std::setw(24) << policy.name();
  std::cout << "\n" << std::fixed << std::setprecision(2);
  for (const Case& each : cases) {
    std::cout << std::setw(28) << each.what;
    for (const auto& policy : policies) std::cout << std::setw(24) << policy.reward(each.evaluation).value;
    std::cout << "\n";
  }
  // The milestone reward never pays for noise: the 4% case earns the same as parity.
  const ca::MilestoneReward milestone;
  return milestone.reward(cases[2].evaluation).value == milestone.reward(cases[1].evaluation).value ? 0 : 1;
}
