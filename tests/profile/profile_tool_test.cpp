// SPDX-License-Identifier: Apache-2.0
// The Profile tool and the text reports of profiles and rewards.
#include "catch.hpp"

#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/profile/detail/temporary_directory.hpp>
#include <cuda_agent/profile/profile_report.hpp>
#include <cuda_agent/profile/profile_tool.hpp>

#include <filesystem>
#include <string>

#include "test_support.hpp"

namespace ca = cuda_agent;

namespace {

ca::ProfileToolOptions tool_options() {
  ca::ProfileToolOptions options;
  options.python = CUDA_AGENT_PYTHON;
  options.harness_directory = std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "resources" / "harness";
  options.environment.set("OMP_NUM_THREADS", "1");
  options.environment.set("CUDA_VISIBLE_DEVICES", "");
  return options;
}

ca::ProfileResult sample_profile() {
  nlohmann::json session = {{"ok", true},
                            {"regime", "cuda_graph"},
                            {"regime_reason", "candidate takes 12.0 µs per call (< 50 µs)"},
                            {"stop_reason", "target_reached"},
                            {"rounds", nlohmann::json::array()},
                            {"warnings", {"CUDA graph capture failed for nobody"}},
                            {"device", {{"kind", "cuda"}, {"name", "NVIDIA H200"}, {"timer", "cuda events"}}}};
  for (int round = 0; round < 12; ++round) {
    const double jitter = 1 + 0.003 * (round % 3);
    session["rounds"].push_back({{"samples",
                                  {{"eager", {{"time_us", 40.0 * jitter}}},
                                   {"compile", {{"time_us", 20.0 * jitter}}},
                                   {"candidate", {{"time_us", 12.0 * jitter}}}}},
                                 {"checked", round % 4 == 0}});
  }
  return ca::profile_result_from_session(session);
}

}  // namespace

static_assert(ca::Tool<ca::ProfileTool<ca::testing::UnconfinedTestSandbox>>);

TEST_CASE("a profile reads as regime, medians, speedups with intervals and verdicts", "[profiling]") {
  const std::string text = ca::describe_profile(sample_profile());
  CHECK_THAT(text, Catch::Matchers::Contains("regime: cuda_graph (candidate takes 12.0"));
  CHECK_THAT(text, Catch::Matchers::Contains("rounds: 12, 3 re-checked, 0 throttled; stopped on target_reached"));
  CHECK_THAT(text, Catch::Matchers::Contains("candidate"));
  CHECK_THAT(text, Catch::Matchers::Contains("vs eager      3.333x  [3.300, 3.367]  FASTER"));
  CHECK_THAT(text, Catch::Matchers::Contains("FASTER"));
  CHECK_THAT(text, Catch::Matchers::Contains("needs >= 1.053x"));
  CHECK_THAT(text, Catch::Matchers::Contains("warning: CUDA graph capture failed"));

  CHECK_THAT(text, Catch::Matchers::Contains("timed on: NVIDIA H200 (cuda, cuda events)"));
  CHECK(text.find("note: CPU timing") == std::string::npos);

  ca::ProfileResult on_the_cpu = sample_profile();
  on_the_cpu.details["device"] = {{"kind", "cpu"}, {"name", "some CPU"}, {"timer", "perf_counter_ns"}};
  const std::string cpu_text = ca::describe_profile(on_the_cpu);
  CHECK_THAT(cpu_text, Catch::Matchers::Contains("timed on: some CPU (cpu, perf_counter_ns)"));
  CHECK_THAT(cpu_text, Catch::Matchers::Contains("note: CPU timing with host timers"));

  ca::ProfileResult rejected;
  rejected.rejection = ca::Rejection{ca::RejectionReason::timed_output_mismatch, "round 2 differs", {}};
  CHECK_THAT(ca::describe_profile(rejected), Catch::Matchers::Contains("timed_output_mismatch: round 2 differs"));

  const ca::Reward reward{3, "faster_than_compile", "beat both"};
  CHECK(ca::describe_reward(reward, "milestone") == "reward 3 [milestone] (faster_than_compile): beat both");
}

TEST_CASE("the Profile tool refuses bad arguments and unavailable timing", "[profiling]") {
  ca::testing::UnconfinedTestSandbox sandbox;
  ca::ProfileTool tool(sandbox, tool_options());
  ca::ToolContext context(std::filesystem::temp_directory_path());
  CHECK(tool.name() == "Profile");
  CHECK(tool.parameters()["properties"].contains("target"));
  CHECK(tool.invoke({{"target", "everything"}}, context).is_error);
  CHECK(tool.invoke({{"top", "many"}}, context).is_error);
  const ca::ToolResult timing = tool.invoke({{"timing", true}}, context);
  CHECK(timing.is_error);
  CHECK_THAT(timing.content, Catch::Matchers::Contains("timing is not available"));
}

TEST_CASE("the Profile tool tables the top kernels of reference and candidate", "[profiling][python]") {
  ca::detail::TemporaryDirectory workspace("cuda-agent-profile-tool-");
  std::filesystem::copy_file(ca::testing::timing_fixtures() / "small_task.py", workspace.path() / "model.py");
  std::filesystem::copy_file(ca::testing::timing_fixtures() / "honest" / "model_new.py",
                             workspace.path() / "model_new.py");
  ca::testing::UnconfinedTestSandbox sandbox;
  ca::ProfileTool tool(sandbox, tool_options());
  ca::ToolContext context(workspace.path());
  const ca::ToolResult result = tool.invoke({{"target", "both"}, {"top", 3}}, context);
  INFO(result.content);
  CHECK_FALSE(result.is_error);
  CHECK_THAT(result.content, Catch::Matchers::Contains("reference (eager)"));
  CHECK_THAT(result.content, Catch::Matchers::Contains("candidate (ModelNew)"));
  CHECK_THAT(result.content, Catch::Matchers::Contains("share"));
  CHECK_THAT(result.content, Catch::Matchers::Contains("aten::mul"));  // CPU operators on a machine without GPU

  // With a timing profiler, the candidate is also timed against the baselines.
  ca::HarnessProfilerOptions timing_options = ca::testing::quick_cpu_timing();
  timing_options.python = CUDA_AGENT_PYTHON;
  timing_options.harness_directory = tool_options().harness_directory;
  timing_options.time_compile = false;
  timing_options.environment.set("OMP_NUM_THREADS", "1");
  timing_options.extra_allowed_operations = {"mul", "add", "relu", "clamp_min"};
  ca::HarnessProfiler profiler(timing_options, ca::testing::UnconfinedTestSandbox{});
  const ca::Task task = ca::testing::fixture_task();
  ca::ProfileTool timed_tool(sandbox, tool_options(), &profiler, &task);
  const ca::ToolResult timed = timed_tool.invoke({{"target", "candidate"}, {"top", 2}}, context);
  INFO(timed.content);
  CHECK_FALSE(timed.is_error);
  CHECK_THAT(timed.content, Catch::Matchers::Contains("Timing against the baselines"));
  CHECK_THAT(timed.content, Catch::Matchers::Contains("vs eager"));
  CHECK(timed.metadata["timing"]["versus_eager"].is_object());

  std::filesystem::remove(workspace.path() / "model_new.py");
  const ca::ToolResult missing = tool.invoke({{"target", "candidate"}}, context);
  CHECK(missing.is_error);
  CHECK_THAT(missing.content, Catch::Matchers::Contains("model_new.py"));
}
