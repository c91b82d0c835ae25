// SPDX-License-Identifier: Apache-2.0
// The milestone reward against the paper's definition, for every combination of verdicts,
// and the raw-speedup reward of the ablation.
#include "catch.hpp"

#include <cuda_agent/evaluate/reward_policies.hpp>

#include <array>
#include <limits>
#include <string>

namespace ca = cuda_agent;

namespace {

ca::SpeedupEstimate estimate(const std::string& baseline, double speedup, ca::Verdict verdict) {
  ca::SpeedupEstimate result;
  result.baseline = baseline;
  result.speedup = speedup;
  result.interval_low = speedup * 0.98;
  result.interval_high = speedup * 1.02;
  result.verdict = verdict;
  return result;
}

ca::Evaluation correct_evaluation() {
  ca::Evaluation evaluation;
  evaluation.compile.succeeded = true;
  evaluation.verification = ca::VerificationResult{};
  evaluation.verification->correct = true;
  return evaluation;
}

ca::Evaluation profiled(ca::Verdict versus_eager, ca::Verdict versus_compile) {
  ca::Evaluation evaluation = correct_evaluation();
  evaluation.profile = ca::ProfileResult{};
  evaluation.profile->versus_eager = estimate("eager", 1.5, versus_eager);
  evaluation.profile->versus_compile = estimate("compile", 1.2, versus_compile);
  return evaluation;
}

/// The paper's definition, written out independently of the implementation:
/// r = -1 if incorrect; 3 if faster than eager and compile; 2 if faster than eager; else 1.
double paper_reward(bool correct, bool faster_than_eager, bool faster_than_compile) {
  if (!correct) return -1;
  if (faster_than_eager && faster_than_compile) return 3;
  if (faster_than_eager) return 2;
  return 1;
}

constexpr std::array<ca::Verdict, 4> all_verdicts{ca::Verdict::faster, ca::Verdict::slower, ca::Verdict::same,
                                                  ca::Verdict::ambiguous};

}  // namespace

TEST_CASE("milestone reward matches the paper for every pair of verdicts", "[rewards]") {
  const ca::MilestoneReward policy;
  CHECK(policy.name() == "milestone");
  for (ca::Verdict eager : all_verdicts) {
    for (ca::Verdict compile : all_verdicts) {
      const ca::Reward reward = policy.reward(profiled(eager, compile));
      INFO("eager " << ca::to_string(eager) << ", compile " << ca::to_string(compile) << ": " << reward.explanation);
      CHECK(reward.value == paper_reward(true, eager == ca::Verdict::faster, compile == ca::Verdict::faster));
      CHECK_FALSE(reward.explanation.empty());
    }
  }
}

TEST_CASE("milestone reward: failures earn -1 with the reason", "[rewards]") {
  const ca::MilestoneReward policy;

  ca::Evaluation not_built;
  not_built.compile.succeeded = false;
  const ca::Reward compile_failure = policy.reward(not_built);
  CHECK(compile_failure.value == -1);
  CHECK(compile_failure.label == "compile_error");

  ca::Evaluation wrong = profiled(ca::Verdict::faster, ca::Verdict::faster);
  wrong.verification->correct = false;
  wrong.verification->rejection = ca::Rejection{ca::RejectionReason::value_mismatch, "output 0 differs at (3, 17)", {}};
  const ca::Reward incorrect = policy.reward(wrong);
  CHECK(incorrect.value == -1);
  CHECK(incorrect.label == "incorrect");
  CHECK_THAT(incorrect.explanation, Catch::Matchers::Contains("value_mismatch"));

  // Caught producing wrong outputs while being timed: fast does not help.
  ca::Evaluation cheating = profiled(ca::Verdict::faster, ca::Verdict::faster);
  cheating.profile->rejection = ca::Rejection{ca::RejectionReason::timed_output_mismatch, "round 7 differs", {}};
  CHECK(policy.reward(cheating).value == -1);

  // Verified but never built is not correct either.
  ca::Evaluation unverified;
  unverified.compile.succeeded = true;
  CHECK(policy.reward(unverified).value == -1);
}

TEST_CASE("milestone reward: correct without timing earns 1, eager alone at most 2", "[rewards]") {
  const ca::MilestoneReward policy;
  const ca::Reward unprofiled = policy.reward(correct_evaluation());
  CHECK(unprofiled.value == 1);
  CHECK(unprofiled.label == "correct");

  ca::Evaluation eager_only = correct_evaluation();
  eager_only.profile = ca::ProfileResult{};
  eager_only.profile->versus_eager = estimate("eager", 1.4, ca::Verdict::faster);
  CHECK(policy.reward(eager_only).value == 2);

  ca::Evaluation compile_only = correct_evaluation();
  compile_only.profile = ca::ProfileResult{};
  compile_only.profile->versus_compile = estimate("compile", 1.4, ca::Verdict::faster);
  CHECK(policy.reward(compile_only).value == 1);

  const ca::Reward best = policy.reward(profiled(ca::Verdict::faster, ca::Verdict::faster));
  CHECK(best.label == "faster_than_compile");
  CHECK_THAT(best.explanation, Catch::Matchers::Contains("FASTER"));
}

TEST_CASE("speed verdicts of a profile that is not rewardable earn no step", "[rewards]") {
  ca::Evaluation host_timed = profiled(ca::Verdict::faster, ca::Verdict::faster);
  host_timed.profile->rewardable = false;
  const ca::Reward milestone = ca::MilestoneReward{}.reward(host_timed);
  CHECK(milestone.value == 1);
  CHECK(milestone.label == "correct");
  CHECK_THAT(milestone.explanation, Catch::Matchers::Contains("host timers"));
  const ca::Reward speedup = ca::SpeedupReward{}.reward(host_timed);
  CHECK(speedup.value == 1);
  CHECK(speedup.label == "correct_unmeasured");
  // The flag survives the evaluation's JSON (trajectories and reports carry it).
  const ca::Evaluation again = nlohmann::json(host_timed).get<ca::Evaluation>();
  REQUIRE(again.profile);
  CHECK_FALSE(again.profile->rewardable);
  CHECK(ca::MilestoneReward{}.reward(again).value == 1);

  // A GPU profile whose speed the trusted clock could not prove says why, in both rewards.
  ca::Evaluation unproven = profiled(ca::Verdict::faster, ca::Verdict::faster);
  unproven.profile->rewardable = false;
  unproven.profile->details["unrewardable"] = "the trusted clock's batches were too short, so the speed is unproven";
  const ca::Reward told = ca::MilestoneReward{}.reward(unproven);
  CHECK(told.value == 1);
  CHECK_THAT(told.explanation, Catch::Matchers::Contains("speed is unproven"));
  CHECK_THAT(told.explanation, !Catch::Matchers::Contains("host timers"));
  CHECK_THAT(ca::SpeedupReward{}.reward(unproven).explanation, Catch::Matchers::Contains("speed is unproven"));
}

TEST_CASE("speedup reward is the raw ratio against the chosen baseline", "[rewards]") {
  const ca::SpeedupReward against_compile;
  CHECK(against_compile.name() == "speedup");
  // The verdict does not matter to the raw reward: that is what the ablation ablates.
  CHECK(against_compile.reward(profiled(ca::Verdict::ambiguous, ca::Verdict::ambiguous)).value == Approx(1.2));

  const ca::SpeedupReward against_eager(
      ca::SpeedupReward::Options{"eager", -1, 1, std::numeric_limits<double>::infinity()});
  CHECK(against_eager.reward(profiled(ca::Verdict::faster, ca::Verdict::same)).value == Approx(1.5));

  const ca::SpeedupReward capped(ca::SpeedupReward::Options{"eager", -2, 0, 1.25});
  CHECK(capped.reward(profiled(ca::Verdict::faster, ca::Verdict::same)).value == Approx(1.25));

  ca::Evaluation wrong;
  CHECK(against_compile.reward(wrong).value == -1);
  CHECK(capped.reward(wrong).value == -2);

  const ca::Reward unmeasured = capped.reward(correct_evaluation());
  CHECK(unmeasured.value == 0);
  CHECK(unmeasured.label == "correct_unmeasured");
}

TEST_CASE("the shipped policies work behind AnyRewardPolicy", "[rewards]") {
  ca::AnyRewardPolicy milestone{ca::MilestoneReward{}};
  ca::AnyRewardPolicy speedup{ca::SpeedupReward{}};
  const ca::Evaluation evaluation = profiled(ca::Verdict::faster, ca::Verdict::faster);
  CHECK(milestone.reward(evaluation).value == 3);
  CHECK(speedup.reward(evaluation).value == Approx(1.2));
  CHECK(milestone.name() == "milestone");
}

TEST_CASE("a task unfit to be scored earns no reward: unscored, distinct from every candidate verdict", "[rewards]") {
  ca::Evaluation unfit;
  unfit.compile.succeeded = true;
  unfit.verification = ca::VerificationResult{};
  unfit.verification->rejection =
      ca::Rejection{ca::RejectionReason::task_unfit, "the constant null model passes every input set", {}};
  CHECK_FALSE(unfit.correct());
  CHECK_FALSE(unfit.scored());
  for (const ca::Reward& reward : {ca::MilestoneReward{}.reward(unfit), ca::SpeedupReward{}.reward(unfit)}) {
    CHECK(reward.label == "unscored");
    CHECK(reward.label == ca::Reward::unscored_label);
    CHECK_FALSE(reward.scored());
    CHECK(reward.value == 0);
    CHECK_THAT(reward.explanation, Catch::Matchers::Contains("constant null model"));
    CHECK(nlohmann::json(reward)["scored"] == false);
  }
  // Every verdict on a candidate is scored, a failure included.
  ca::Evaluation wrong = unfit;
  wrong.verification->rejection->reason = ca::RejectionReason::value_mismatch;
  CHECK(wrong.scored());
  CHECK(ca::MilestoneReward{}.reward(wrong).value == -1);
  CHECK(ca::MilestoneReward{}.reward(wrong).scored());
  CHECK(ca::MilestoneReward{}.reward(correct_evaluation()).scored());
  // The mark survives the evaluation's JSON.
  const nlohmann::json as_json = unfit;
  CHECK(as_json["scored"] == false);
  CHECK_FALSE(as_json.get<ca::Evaluation>().scored());
  CHECK(nlohmann::json(correct_evaluation())["scored"] == true);
}
