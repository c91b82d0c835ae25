// SPDX-License-Identifier: Apache-2.0
// From a timing session's samples to statistics and verdicts, and whole sessions through
// the Python harness on the CPU (the GPU runs the same code with CUDA events).
#include "catch.hpp"

#include <cuda_agent/profile/harness_profiler.hpp>

#include "test_support.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ca = cuda_agent;

namespace {

nlohmann::json sample(double time_us, double clock_mhz = 1980) {
  return {{"time_us", time_us}, {"calls", 1}, {"raw_us", time_us}, {"escape_us", 0.0}, {"clock_mhz", clock_mhz}};
}

/// A session of `rounds` rounds in which eager takes `eager` µs, the candidate `candidate`
/// and (if positive) compile `compile`, with a little deterministic jitter.
nlohmann::json session(int rounds, double eager, double candidate, double compile) {
  nlohmann::json result = {{"ok", true},
                           {"regime", "per_call"},
                           {"rounds", nlohmann::json::array()},
                           {"compile_source", compile > 0 ? "live" : "cache"}};
  for (int round = 0; round < rounds; ++round) {
    const double jitter = 1 + 0.004 * ((round * 7) % 5 - 2);
    nlohmann::json samples = {{"eager", sample(eager * jitter)}, {"candidate", sample(candidate * jitter)}};
    if (compile > 0) samples["compile"] = sample(compile * jitter);
    result["rounds"].push_back(
        {{"round", round}, {"samples", samples}, {"throttled", false}, {"checked", round == rounds - 1}});
  }
  return result;
}

}  // namespace

TEST_CASE("a session with live baselines gives paired speedups and verdicts", "[profiling]") {
  const ca::ProfileResult result = ca::profile_result_from_session(session(20, 1000, 500, 800));
  REQUIRE_FALSE(result.rejection);
  CHECK(result.regime == ca::TimingRegime::per_call);
  REQUIRE(result.timing("candidate"));
  CHECK(result.timing("candidate")->samples == 20);
  CHECK(result.timing("eager")->median_us == Approx(1000).epsilon(0.01));
  REQUIRE(result.versus_eager);
  CHECK(result.versus_eager->speedup == Approx(2.0).epsilon(0.01));
  CHECK(result.versus_eager->verdict == ca::Verdict::faster);
  REQUIRE(result.versus_compile);
  CHECK(result.versus_compile->speedup == Approx(1.6).epsilon(0.01));
  CHECK(result.versus_compile->verdict == ca::Verdict::faster);
  CHECK(result.details["rechecked_rounds"] == 1);
}

TEST_CASE("how samples were covered and how the session spent its time reach the details", "[profiling]") {
  nlohmann::json timed = session(6, 1000, 500, 0);
  timed["dispatch_cover"] = {{"eager", {{"samples", 6}, {"covered", 5}, {"covered_share", 5.0 / 6}}}};
  timed["time_budget"] = {{"limit_s", 9.0}, {"rounds_s", 4.0}, {"overhead_s", 4.5}, {"comparisons", 1}};
  const ca::ProfileResult result = ca::profile_result_from_session(timed);
  CHECK(result.details["dispatch_cover"]["eager"]["covered"] == 5);
  CHECK(result.details["time_budget"]["limit_s"] == 9.0);
}

namespace {

nlohmann::json cached_baselines(double eager, double compile) {
  nlohmann::json cached = {{"regime", "per_call"}, {"rounds", nlohmann::json::array()}, {"measured_at", "2026-11-30"}};
  for (int round = 0; round < 15; ++round)
    cached["rounds"].push_back({{"eager", eager + round}, {"compile", compile + round}});
  return cached;
}

}  // namespace

TEST_CASE("cached baselines reach the compile speedup through eager", "[profiling]") {
  nlohmann::json live = session(15, 1020, 850, 0);  // the clock is 2% slower than when cached
  live["cached_baselines"] = cached_baselines(1000, 1050);
  const ca::ProfileResult result = ca::profile_result_from_session(live);
  REQUIRE(result.versus_compile);
  // compile/eager = 1.05 cached, eager/candidate = 1.2 live: 1.26x.
  CHECK(result.versus_compile->speedup == Approx(1.26).epsilon(0.01));
  CHECK(result.versus_compile->verdict == ca::Verdict::faster);
  CHECK(result.versus_eager->speedup == Approx(1.2).epsilon(0.01));
  CHECK(result.timing("compile"));
  CHECK(result.details["compile_timing"]["source"] == "cache");
  CHECK(result.details["compile_timing"]["eager_drift"].get<double>() == Approx(1020.0 / 1007.0));  // medians
}

TEST_CASE("a cached speedup is no verdict when eager drifted as far as the margin", "[profiling]") {
  // Eager runs 10% slower than when cached. If compile slowed down with it the candidate is
  // 1.155x faster; if compile stayed put, only 1.05x: the interval holds both.
  nlohmann::json live = session(15, 1100, 1000, 0);
  live["cached_baselines"] = cached_baselines(1000, 1050);
  const ca::ProfileResult result = ca::profile_result_from_session(live);
  REQUIRE(result.versus_compile);
  CHECK(result.versus_compile->speedup == Approx(1.155).epsilon(0.01));
  CHECK(result.versus_compile->interval_low < 1.06);
  CHECK(result.versus_compile->interval_high > 1.155);
  CHECK(result.versus_compile->verdict == ca::Verdict::ambiguous);
  const nlohmann::json& before = result.details["compile_timing"]["interval_before_drift"];
  CHECK(before[0].get<double>() > 1.0526);  // FASTER before the widening
  // The eager verdict is paired within the session and stays as it was.
  CHECK(result.versus_eager->verdict == ca::Verdict::faster);
}

TEST_CASE("throttled rounds are left out while enough others remain", "[profiling]") {
  nlohmann::json data = session(12, 1000, 1000, 1000);
  for (int round : {1, 4, 7}) {
    data["rounds"][round]["throttled"] = true;
    data["rounds"][round]["samples"]["candidate"]["time_us"] = 400.0;  // would look 2.5x faster
  }
  const ca::ProfileResult result = ca::profile_result_from_session(data);
  CHECK(result.details["throttled_rounds"] == 3);
  CHECK(result.timing("candidate")->samples == 9);
  CHECK(result.timing("candidate")->discarded == 3);
  CHECK(result.versus_eager->verdict == ca::Verdict::same);

  // When nearly every round was throttled they all stay, with a warning.
  for (auto& round : data["rounds"]) round["throttled"] = true;
  const ca::ProfileResult all_throttled = ca::profile_result_from_session(data);
  CHECK(all_throttled.timing("candidate")->samples == 12);
  CHECK(all_throttled.details["warnings"].dump().find("throttled") != std::string::npos);
}

TEST_CASE("rejections and harness failures of a session are reported as such", "[profiling]") {
  const nlohmann::json rejected = {
      {"ok", false},
      {"rejection",
       {{"reason", "timed_output_mismatch"}, {"message", "round 3 differs"}, {"details", {{"round", 3}}}}}};
  const ca::ProfileResult caught = ca::profile_result_from_session(rejected);
  REQUIRE(caught.rejection);
  CHECK(caught.rejection->reason == ca::RejectionReason::timed_output_mismatch);
  CHECK(caught.rejection->details["round"] == 3);
  CHECK_FALSE(caught.versus_eager);

  const nlohmann::json broken = {{"ok", false}, {"error", "RuntimeError: no CUDA"}, {"traceback", "..."}};
  const ca::ProfileResult failed = ca::profile_result_from_session(broken);
  REQUIRE(failed.rejection);
  CHECK(failed.rejection->reason == ca::RejectionReason::harness_error);
  CHECK_THAT(failed.rejection->message, Catch::Matchers::Contains("no CUDA"));

  // Too few rounds for an interval: no verdict rather than a guess.
  const ca::ProfileResult sparse = ca::profile_result_from_session(session(1, 1000, 500, 800));
  CHECK_FALSE(sparse.versus_eager);
  CHECK_FALSE(sparse.versus_compile);
}

namespace {

using ca::testing::fixture_task;
using ca::testing::UnconfinedTestSandbox;

ca::HarnessProfilerOptions cpu_options() {
  ca::HarnessProfilerOptions options = ca::testing::quick_cpu_timing();
  options.python = CUDA_AGENT_PYTHON;
  options.harness_directory = std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "resources" / "harness";
  options.time_compile = false;
  options.check_probability = 1.0;
  options.environment.set("OMP_NUM_THREADS", "1");
  // The CPU fixtures compute with torch operators, which the forward guard refuses unless allowed.
  options.extra_allowed_operations = {"mul", "add", "relu", "clamp_min"};
  options.timeout = std::chrono::seconds(240);
  options.seed = 99;
  return options;
}

ca::Candidate fixture_candidate(const std::string& name, const std::filesystem::path& build) {
  ca::Candidate candidate;
  candidate.source_directory = ca::testing::timing_fixtures() / name;
  candidate.build_directory = build;
  return candidate;
}

}  // namespace

TEST_CASE("a CPU session through the harness times, re-checks and judges", "[profiling][python]") {
  ca::detail::TemporaryDirectory build("cuda-agent-profiler-test-");
  ca::HarnessProfiler profiler(cpu_options(), UnconfinedTestSandbox{});
  const ca::ProfileResult result = profiler.profile(fixture_task(), fixture_candidate("honest", build.path()));
  INFO(nlohmann::json(result).dump(1).substr(0, 4000));
  REQUIRE_FALSE(result.rejection);
  REQUIRE(result.timing("candidate"));
  REQUIRE(result.timing("eager"));
  CHECK(result.timing("candidate")->samples >= 4);
  REQUIRE(result.versus_eager);
  CHECK(result.versus_eager->interval_low <= result.versus_eager->speedup);
  CHECK_FALSE(result.versus_compile);  // compile timing was switched off
  CHECK(result.details["rechecked_rounds"].get<int>() >= 1);
  // The trusted clock bounded the candidate's time and found its report within the margin.
  const nlohmann::json& clock = result.details["trusted_clock"];
  CHECK(clock["batches"].get<int>() >= 3);
  CHECK(clock["enforced"] == true);
  CHECK(clock["rejected"] == false);
  // Host timers: verdicts are shown, never rewarded.
  CHECK_FALSE(result.rewardable);
  CHECK(result.details["candidate_side"]["sandbox"] == "unconfined test double");
  // The session directory is gone with the session.
  CHECK(std::filesystem::is_empty(build.path()));
}

TEST_CASE("the reference timed against itself is never FASTER or SLOWER", "[profiling][python]") {
  ca::detail::TemporaryDirectory build("cuda-agent-profiler-test-");
  ca::HarnessProfilerOptions options = cpu_options();
  options.candidate_kind = "reference";
  options.budget.seconds = 1.0;
  options.budget.max_rounds = 40;
  // Host timers on a shared 2-core VM put the same 50 µs operator 10 to 40% apart between
  // two processes, one way or the other from run to run (whatever the order of samples,
  // the re-checks or the allocator), and 5% honesty is the GPU's property, measured by
  // benchmarks/timing_honesty. On the CPU the pipeline must not tilt grossly (one side
  // charged twice, say, or timed with work of the other side's inside its window).
  options.statistics.threshold = 0.5;
  ca::HarnessProfiler profiler(options, UnconfinedTestSandbox{});
  const ca::ProfileResult result = profiler.profile(fixture_task(), fixture_candidate("honest", build.path()));
  REQUIRE_FALSE(result.rejection);
  REQUIRE(result.versus_eager);
  INFO("A/A speedup " << result.versus_eager->speedup << " [" << result.versus_eager->interval_low << ", "
                      << result.versus_eager->interval_high << "]");
  CHECK(result.versus_eager->verdict != ca::Verdict::faster);
  CHECK(result.versus_eager->verdict != ca::Verdict::slower);
}

TEST_CASE("a candidate caught with wrong timed outputs is rejected through the profiler", "[profiling][python]") {
  ca::detail::TemporaryDirectory build("cuda-agent-profiler-test-");
  ca::HarnessProfiler profiler(cpu_options(), UnconfinedTestSandbox{});
  const ca::ProfileResult result = profiler.profile(fixture_task(), fixture_candidate("phase_detector", build.path()));
  REQUIRE(result.rejection);
  CHECK(result.rejection->reason == ca::RejectionReason::timed_output_mismatch);
  CHECK_FALSE(result.versus_eager);
}

TEST_CASE("a candidate whose process understates its times is rejected through the profiler", "[profiling][python]") {
  ca::detail::TemporaryDirectory build("cuda-agent-profiler-test-");
  ca::HarnessProfiler profiler(cpu_options(), UnconfinedTestSandbox{});
  const ca::ProfileResult result = profiler.profile(fixture_task(), fixture_candidate("under_reporter", build.path()));
  REQUIRE(result.rejection);
  CHECK(result.rejection->reason == ca::RejectionReason::time_below_trusted_bound);
  CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("trusted side's own clock"));
  CHECK_FALSE(result.versus_eager);
}

TEST_CASE("a candidate side that cannot start ends the session early with a reason", "[profiling][python]") {
  ca::detail::TemporaryDirectory build("cuda-agent-profiler-test-");
  ca::HarnessProfilerOptions options = cpu_options();
  options.candidate_kind = "no_such_kind";
  ca::HarnessProfiler profiler(options, UnconfinedTestSandbox{});
  const auto started = std::chrono::steady_clock::now();
  const ca::ProfileResult result = profiler.profile(fixture_task(), fixture_candidate("honest", build.path()));
  REQUIRE(result.rejection);
  CHECK(result.rejection->reason == ca::RejectionReason::load_error);
  CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("no_such_kind"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(120));
}

namespace {

/// Records what the profiler asks for and answers with a canned session.
struct RecordingLauncher {
  std::shared_ptr<std::vector<nlohmann::json>> requests = std::make_shared<std::vector<nlohmann::json>>();
  nlohmann::json answer;
  ca::TimingSessionOutcome launch(const ca::Task&, const ca::Candidate&, nlohmann::json reference,
                                  nlohmann::json candidate, std::chrono::seconds) {
    requests->push_back(std::move(reference));
    requests->push_back(std::move(candidate));
    ca::TimingSessionOutcome outcome;
    outcome.reference_result = answer;
    if (answer.is_null()) outcome.reference_failure = "exit code 1: Traceback ...";
    outcome.candidate_side = {{"exit", "exit code 0"}};
    return outcome;
  }
};
static_assert(ca::TimingLauncher<RecordingLauncher>);

}  // namespace

TEST_CASE("the profiler tells each side what it needs, and nothing more", "[profiling]") {
  ca::detail::TemporaryDirectory build("cuda-agent-profiler-test-");
  RecordingLauncher launcher;
  launcher.answer = session(12, 1000, 800, 900);
  auto requests = launcher.requests;
  ca::HarnessProfilerOptions options;
  options.baseline_cache_directory = "/var/cache/cuda-agent/baselines";
  options.extra_allowed_operations = {"mm"};
  options.seed = 7;
  ca::HarnessProfiler profiler(options, std::move(launcher));
  ca::Candidate candidate;
  candidate.source_directory = "/work/candidate";
  candidate.build_directory = build.path();
  const ca::ProfileResult result = profiler.profile(ca::testing::fixture_task(), candidate);
  REQUIRE(requests->size() == 2);
  const nlohmann::json& reference = (*requests)[0];
  const nlohmann::json& candidate_side = (*requests)[1];
  CHECK(reference["task_hash"] == ca::testing::fixture_task().content_hash());
  CHECK(reference["seed"] == 7);
  CHECK(reference["baseline_cache"]["directory"] == "/var/cache/cuda-agent/baselines");
  CHECK(reference["budget"]["min_rounds"] == 10);
  // The candidate side learns neither the seed nor where the cache is; where things live
  // is the launcher's business.
  CHECK_FALSE(candidate_side.contains("seed"));
  CHECK_FALSE(candidate_side.contains("baseline_cache"));
  CHECK_FALSE(candidate_side.contains("session"));
  CHECK(candidate_side["policy"]["extra_allowed_operations"] == nlohmann::json::array({"mm"}));
  CHECK(candidate_side["candidate_kind"] == "model_new");
  // A candidate's report is held to the trusted clock; only the A/A kinds are merely observed.
  CHECK(reference["trusted_clock"]["enabled"] == true);
  CHECK(reference["trusted_clock"]["enforce"] == true);
  CHECK_FALSE(candidate_side.contains("trusted_clock"));
  CHECK(result.rewardable);  // CUDA, and the clock bounded the time
  REQUIRE(result.versus_eager);
  CHECK(result.versus_eager->speedup == Approx(1.25).epsilon(0.01));
  CHECK(result.details["candidate_side"]["exit"] == "exit code 0");

  RecordingLauncher unbounded;
  unbounded.answer = session(12, 1000, 800, 900);
  unbounded.answer["trusted_clock"] = {{"mode", "loop"}, {"unbounded", true}, {"rejected", false}};
  ca::HarnessProfilerOptions observed = options;
  observed.candidate_kind = "reference";
  auto observed_requests = unbounded.requests;
  ca::HarnessProfiler loose(observed, std::move(unbounded));
  const ca::ProfileResult unproven = loose.profile(ca::testing::fixture_task(), candidate);
  CHECK((*observed_requests)[0]["trusted_clock"]["enforce"] == false);
  CHECK_FALSE(unproven.rejection);
  CHECK_FALSE(unproven.rewardable);  // a time the clock could not bound earns no speed reward

  RecordingLauncher failing;
  ca::HarnessProfiler broken(options, std::move(failing));
  const ca::ProfileResult failure = broken.profile(ca::testing::fixture_task(), candidate);
  REQUIRE(failure.rejection);
  CHECK(failure.rejection->reason == ca::RejectionReason::harness_error);
  CHECK_THAT(failure.rejection->message, Catch::Matchers::Contains("Traceback"));
}

TEST_CASE("a request's budget replaces the profiler's own for its session alone", "[profiling]") {
  RecordingLauncher launcher;
  launcher.answer = session(12, 1000, 800, 900);
  auto requests = launcher.requests;
  ca::HarnessProfilerOptions options;
  options.budget.seconds = 5.0;
  options.budget.max_rounds = 400;
  ca::AnyProfiler profiler(ca::HarnessProfiler(options, std::move(launcher)));
  ca::Candidate candidate;
  candidate.source_directory = "/work/candidate";
  ca::EvaluationPolicy policy;
  policy.timing_seconds = 0.75;
  policy.timing_max_rounds = 30;
  const ca::ProfileResult within = profiler.profile(ca::testing::fixture_task(), candidate, policy);
  const ca::ProfileResult own = profiler.profile(ca::testing::fixture_task(), candidate);
  REQUIRE(requests->size() == 4);
  CHECK((*requests)[0]["budget"]["time_s"] == 0.75);
  CHECK((*requests)[0]["budget"]["max_rounds"] == 30);
  CHECK((*requests)[0]["budget"]["min_rounds"] == options.budget.min_rounds);  // what it did not name stays
  CHECK(within.details["budget"] == nlohmann::json{{"seconds", 0.75}, {"max_rounds", 30}});
  CHECK((*requests)[2]["budget"]["time_s"] == 5.0);
  CHECK((*requests)[2]["budget"]["max_rounds"] == 400);
  CHECK(own.details["budget"] == nlohmann::json{{"seconds", 5.0}, {"max_rounds", 400}});
}
