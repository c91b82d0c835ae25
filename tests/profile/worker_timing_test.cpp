// SPDX-License-Identifier: Apache-2.0
// The trusted evaluation with timing in the verifier's warm workers, on the CPU: compile,
// verify, profile (baselines cached between evaluations) and the milestone reward.
#include "catch.hpp"

#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>

#include <memory>
#include <string>

#include "test_support.hpp"
#include "verify/verify_support.hpp"

namespace ca = cuda_agent;

namespace {

ca::HarnessProfilerOptions quick_cpu_timing(const std::filesystem::path& cache) {
  ca::HarnessProfilerOptions options = ca::testing::quick_cpu_timing();
  options.compile_backend = "eager";  // dynamo without inductor: quick, and still the compile path
  options.baseline_cache_directory = cache;
  options.timeout = std::chrono::seconds(300);
  return options;
}

}  // namespace

TEST_CASE("a trusted evaluation times the candidate in the verifier's warm workers", "[python][profiling]") {
  ca::testing::ScratchDirectory scratch("worker-timing");
  auto verifier = std::make_shared<ca::HarnessVerifier>(ca::testing::harness_options("cpu"));
  ca::HarnessProfiler profiler(quick_cpu_timing(scratch.path() / "cache"), ca::WorkerTimingLauncher(verifier));
  ca::TrustedEvaluator<ca::SharedVerifier<ca::HarnessVerifier>, ca::ProcessSandbox> evaluator(
      ca::testing::test_compiler("cpu", scratch.path()), ca::SharedVerifier<ca::HarnessVerifier>(verifier),
      ca::AnyProfiler(std::move(profiler)));
  const ca::Task relu = ca::testing::adversarial_task("cpu", "relu");
  const std::filesystem::path candidate =
      ca::testing::assemble_candidate(scratch.path() / "workspace", ca::testing::relu_model_new, "cpu");

  const ca::Evaluation first = evaluator.evaluate(relu, candidate);
  INFO(nlohmann::json(first).dump(1).substr(0, 6000));
  REQUIRE(first.correct());
  REQUIRE(first.profile);
  REQUIRE_FALSE(first.profile->rejection);
  CHECK(first.profile->details["baseline_cache"]["status"] == "miss");
  CHECK(first.profile->details["compile_source"] == "live");
  REQUIRE(first.profile->versus_eager);
  REQUIRE(first.profile->versus_compile);
  CHECK(first.profile->details["rechecked_rounds"].get<int>() >= 1);
  CHECK(first.profile->details["candidate_side"]["worker"] == "candidate harness worker");
  // The arena crossed from the reference worker's sandbox into the candidate worker's, and
  // the trusted clock bounded the candidate's time.
  CHECK(first.profile->details["trusted_clock"]["batches"].get<int>() >= 3);
  CHECK(first.profile->details["trusted_clock"]["rejected"] == false);
  // On the CPU a correct candidate earns 1, whatever its verdicts.
  const ca::Reward reward = ca::MilestoneReward{}.reward(first);
  CHECK(reward.value == 1);

  // The next evaluation of the task takes compile's timings from the cache.
  const ca::Evaluation second = evaluator.evaluate(relu, candidate);
  REQUIRE(second.profile);
  REQUIRE_FALSE(second.profile->rejection);
  CHECK(second.profile->details["baseline_cache"]["status"] == "hit");
  CHECK(second.profile->versus_compile);
}
