// SPDX-License-Identifier: Apache-2.0
// On a GPU: the profiler's A/A honesty on a short kernel, and a trusted evaluation of a
// real CUDA candidate with timing in the verifier's warm workers and the milestone reward.
#include "catch.hpp"

#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "test_support.hpp"
#include "verify/verify_support.hpp"

namespace ca = cuda_agent;
namespace fs = std::filesystem;

TEST_CASE("on the GPU, the reference timed against itself is never FASTER or SLOWER", "[gpu][profiling]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::HarnessProfilerOptions options;
  options.python = CUDA_AGENT_PYTHON;
  options.harness_directory = fs::path(CUDA_AGENT_SOURCE_DIR) / "resources" / "harness";
  options.candidate_kind = "reference";
  options.time_compile = false;
  options.budget.seconds = 2.0;
  ca::HarnessProfiler profiler(options, ca::testing::UnconfinedTestSandbox{});
  ca::testing::ScratchDirectory build("gpu-aa");
  for (int repetition = 0; repetition < 3; ++repetition) {
    const ca::ProfileResult result = profiler.profile(
        ca::testing::fixture_task(), ca::Candidate{ca::testing::timing_fixtures() / "honest", build.path()});
    INFO(nlohmann::json(result).dump(1).substr(0, 4000));
    REQUIRE_FALSE(result.rejection);
    CHECK(result.regime == ca::TimingRegime::cuda_graph);  // a 64 x 256 ReLU is far under 50 µs
    REQUIRE(result.versus_eager);
    CHECK(result.versus_eager->verdict != ca::Verdict::faster);
    CHECK(result.versus_eager->verdict != ca::Verdict::slower);
  }
}

TEST_CASE("on the GPU, a fused CUDA candidate is verified, timed and rewarded", "[gpu][profiling]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::ScratchDirectory scratch("gpu-evaluation");
  const fs::path task_directory = fs::path(CUDA_AGENT_SOURCE_DIR) / "benchmarks" / "edit_to_verdict" / "task";
  const fs::path workspace = scratch.path() / "workspace";
  fs::create_directories(workspace / "kernels");
  fs::copy_file(task_directory / "model_new.py", workspace / "model_new.py");
  for (const auto& entry : fs::directory_iterator(task_directory / "kernels"))
    fs::copy_file(entry.path(), workspace / "kernels" / entry.path().filename());
  ca::Task swish;
  swish.name = "swish";
  swish.reference_source = ca::testing::read_text(task_directory / "model.py");

  auto verifier = std::make_shared<ca::HarnessVerifier>(ca::testing::harness_options("cuda"));
  ca::HarnessProfilerOptions timing;
  timing.device = "cuda";
  timing.baseline_cache_directory = scratch.path() / "baselines";
  ca::HarnessProfiler profiler(timing, ca::WorkerTimingLauncher(verifier));
  ca::TrustedEvaluator<ca::SharedVerifier<ca::HarnessVerifier>, ca::ProcessSandbox> evaluator(
      ca::testing::test_compiler("cuda", scratch.path()), ca::SharedVerifier<ca::HarnessVerifier>(verifier),
      ca::AnyProfiler(std::move(profiler)));
  const ca::Evaluation evaluation = evaluator.evaluate(swish, workspace);
  INFO(nlohmann::json(evaluation).dump(1).substr(0, 8000));
  REQUIRE(evaluation.correct());
  REQUIRE(evaluation.profile);
  REQUIRE(evaluation.profile->versus_eager);
  REQUIRE(evaluation.profile->versus_compile);
  // One pass over memory against eager's two (sigmoid, then multiply): clearly faster.
  CHECK(evaluation.profile->versus_eager->verdict == ca::Verdict::faster);
  CHECK(ca::MilestoneReward{}.reward(evaluation).value >= 2);
  CHECK(evaluation.profile->details["device"]["kind"] == "cuda");
  CHECK(evaluation.profile->details["reference_clock_mhz"].get<double>() > 300);
}
