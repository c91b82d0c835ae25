// SPDX-License-Identifier: Apache-2.0
#pragma once

// Runs the candidates of tests/adversarial/manifest.json through the trusted evaluation
// (static checks, build, verification) on one device and checks each verdict against the
// manifest: exploits must be rejected with one of the listed reasons, legitimate tricky
// candidates must be accepted. Candidates listed with "without_static_checks" are run a
// second time with the static checks off, so that the dynamic checks behind them are
// tested on their own; there "correct_without_speed_reward" among the expected verdicts
// accepts an exploit that the dynamic checks hold to reward 1 (right outputs, no speed).
//
// Candidates marked "timed" in the manifest exploit the timing rather than the verification:
// they run through the whole trusted evaluation, profiling included (the verifier's warm
// workers time them), and their verdict is the evaluation's.
//
// Two environment variables narrow a run down when one case needs a closer look:
//   CUDA_AGENT_ADVERSARIAL_ONLY=name,name   only these candidates
//   CUDA_AGENT_ADVERSARIAL_PREPARED_CHILDREN=0   the verifier's workers fork each
//       verification's processes when its request comes, not ahead of it
//       (HarnessOptions::prepared_children, on by default)

#include "catch.hpp"

#include "profile/test_support.hpp"
#include "verify/verify_support.hpp"

#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>

#include <algorithm>   // find
#include <chrono>      // steady_clock
#include <cstdlib>     // getenv
#include <filesystem>  // path
#include <fstream>     // ifstream, ofstream
#include <iostream>    // cout
#include <sstream>     // istringstream
#include <string>      // string
#include <vector>      // vector

namespace cuda_agent::testing {

struct SuiteCase {
  nlohmann::json entry;
  std::string name;
  std::vector<std::string> expected;  // empty: must be accepted
  bool static_checks = true;
};

inline nlohmann::json load_manifest() {
  std::ifstream stream(adversarial_directory() / "manifest.json");
  return nlohmann::json::parse(stream);
}

/// The cases of `device`: `accept` selects the candidates that must pass, otherwise those
/// that must be rejected (with and without the static checks); `timed` those that run with
/// the profiler, otherwise those that run without.
inline std::vector<SuiteCase> suite_cases(const std::string& device, bool accept, bool timed = false) {
  std::vector<std::string> only;
  if (const char* names = std::getenv("CUDA_AGENT_ADVERSARIAL_ONLY")) {
    std::istringstream list(names);
    for (std::string name; std::getline(list, name, ',');)
      if (!name.empty()) only.push_back(name);
  }
  std::vector<SuiteCase> cases;
  const nlohmann::json manifest = load_manifest();
  for (const nlohmann::json& entry : manifest["candidates"]) {
    if (!entry.contains(device) || entry.value("timed", false) != timed) continue;
    if (!only.empty() && std::find(only.begin(), only.end(), entry["name"].get<std::string>()) == only.end()) continue;
    const nlohmann::json& expect = entry[device]["expect"];
    const bool correct = expect.is_string() && expect == "correct";
    if (correct != accept) continue;
    SuiteCase main{entry, entry["name"], correct ? std::vector<std::string>{} : expect.get<std::vector<std::string>>(),
                   true};
    cases.push_back(main);
    if (const auto dynamic = entry.find("without_static_checks"); dynamic != entry.end() && dynamic->contains(device)) {
      SuiteCase without = main;
      without.expected = (*dynamic)[device].get<std::vector<std::string>>();
      without.static_checks = false;
      cases.push_back(without);
    }
  }
  return cases;
}

/// A candidate directory for `entry` on `device`: its model_new.py (model_new.<device>.py
/// when present) and its own kernels (kernels.<device>/) or else the shared toolbox. An
/// entry with a "source" takes the files of that candidate.
inline std::filesystem::path assemble_suite_candidate(const nlohmann::json& entry, const std::string& device,
                                                      const std::filesystem::path& into) {
  const std::filesystem::path source =
      adversarial_directory() / "candidates" / entry.value("source", entry["name"].get<std::string>());
  std::filesystem::path model = source / ("model_new." + device + ".py");
  if (!std::filesystem::exists(model)) model = source / "model_new.py";
  std::ifstream stream(model);
  const std::string text{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  const std::filesystem::path own = source / ("kernels." + device);
  return assemble_candidate(into, text, device, std::filesystem::exists(own) ? own : std::filesystem::path());
}

/// The profiler of the timed cases: short sessions, in the verifier's warm workers.
inline HarnessProfilerOptions suite_timing(const std::string& device, const std::filesystem::path& scratch) {
  HarnessProfilerOptions options;
  if (device == "cpu") {
    options = quick_cpu_timing();
    options.compile_backend = "eager";  // dynamo without inductor: quick, and still the compile path
  } else {
    options.device = device;
    options.budget.seconds = 1.0;
  }
  options.baseline_cache_directory = scratch / "baseline-cache";
  options.timeout = std::chrono::seconds(600);
  return options;
}

template <class Evaluator>
void run_cases(Evaluator& evaluator, VerificationPolicy& policy, const std::vector<SuiteCase>& cases,
               const std::string& device, const std::filesystem::path& scratch, const std::filesystem::path& report);

/// Evaluates every case and checks its verdict; writes a JSON report to `report`. `timed`:
/// the cases marked so, through the whole trusted evaluation with its profiler.
inline void run_suite(const std::string& device, bool accept, const std::filesystem::path& report, bool timed = false) {
  const std::vector<SuiteCase> cases = suite_cases(device, accept, timed);
  if (cases.empty() && std::getenv("CUDA_AGENT_ADVERSARIAL_ONLY")) {
    WARN("CUDA_AGENT_ADVERSARIAL_ONLY names no candidate of this part");
    return;
  }
  REQUIRE_FALSE(cases.empty());
  ScratchDirectory scratch("adversarial-" + device);
  HarnessOptions options = harness_options(device);
  options.work_directory = scratch.path() / "harness";
  if (const char* prepared = std::getenv("CUDA_AGENT_ADVERSARIAL_PREPARED_CHILDREN"))
    options.prepared_children = std::string(prepared) == "1";
  TrustedEvaluatorOptions evaluator_options;
  evaluator_options.work_directory = scratch.path() / "evaluations";
  if (timed) {
    auto verifier = std::make_shared<HarnessVerifier>(options);
    TrustedEvaluator<SharedVerifier<HarnessVerifier>, ProcessSandbox> evaluator(
        test_compiler(device, scratch.path()), SharedVerifier<HarnessVerifier>(verifier),
        AnyProfiler(HarnessProfiler(suite_timing(device, scratch.path()), WorkerTimingLauncher(verifier))),
        evaluator_options);
    run_cases(evaluator, verifier->policy(), cases, device, scratch.path(), report);
  } else {
    TrustedEvaluator<HarnessVerifier, ProcessSandbox> evaluator(
        test_compiler(device, scratch.path()), HarnessVerifier(options), std::nullopt, evaluator_options);
    run_cases(evaluator, evaluator.verifier().policy(), cases, device, scratch.path(), report);
  }
}

template <class Evaluator>
void run_cases(Evaluator& evaluator, VerificationPolicy& policy, const std::vector<SuiteCase>& cases,
               const std::string& device, const std::filesystem::path& scratch, const std::filesystem::path& report) {
  const VerificationPolicy defaults = policy;
  nlohmann::json results = nlohmann::json::array();
  int index = 0;
  for (const SuiteCase& suite_case : cases) {
    policy = defaults;
    policy.static_checks = suite_case.static_checks;
    const nlohmann::json settings = suite_case.entry.value("policy", nlohmann::json::object());
    if (settings.value("tolerance", "") == "strict") policy.tolerance = TolerancePolicy::strict();
    if (settings.contains("timeout_s")) policy.timeout = std::chrono::seconds(settings["timeout_s"].get<int>());
    // A candidate caught by most draws of its inputs, not all, is judged on fixed ones.
    if (settings.contains("seeds")) policy.seeds = settings["seeds"].get<std::vector<std::uint32_t>>();
    // The shared toolbox carries the cuBLAS GEMM of the matmul task: its users run under the
    // host's fixed policy. Candidates with kernels of their own get the policy derived from
    // the task, as in a real evaluation.
    const std::string source = suite_case.entry.value("source", suite_case.name);
    if (!std::filesystem::exists(adversarial_directory() / "candidates" / source / ("kernels." + device)))
      policy.libraries.derive_from_reference = false;
    const Task task = adversarial_task(device, suite_case.entry["task"]);
    const std::filesystem::path directory =
        assemble_suite_candidate(suite_case.entry, device, scratch / "candidates" / std::to_string(++index));
    const auto started = std::chrono::steady_clock::now();
    const Evaluation evaluation = evaluator.evaluate(task, directory);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const std::optional<Rejection> rejection = evaluation.rejection();
    const std::string verdict = rejection ? std::string(to_string(rejection->reason)) : "correct";
    const std::string label = suite_case.name + (suite_case.static_checks ? "" : " (without static checks)");
    const double reward = MilestoneReward{}.reward(evaluation).value;
    std::cout << "  " << label << ": " << verdict << " (reward " << reward << ") in " << seconds << " s"
              << (rejection ? "\n      " + rejection->message.substr(0, 300) : std::string()) << std::endl;
    results.push_back(
        {{"candidate", suite_case.name},
         {"static_checks", suite_case.static_checks},
         {"catalog", suite_case.entry["catalog"]},
         {"verdict", verdict},
         {"message", rejection ? rejection->message : ""},
         {"seconds", seconds},
         {"reward", reward},
         {"expected", suite_case.expected.empty() ? nlohmann::json("correct") : nlohmann::json(suite_case.expected)}});
    const nlohmann::json as_json = evaluation;
    if (const nlohmann::json::json_pointer clock_at("/profile/details/trusted_clock"); as_json.contains(clock_at)) {
      // What the trusted clock saw: how honest reports sit against its bound is what its margin has to hold.
      const nlohmann::json& clock = as_json.at(clock_at);
      const auto number = [&clock](const char* key) { return clock.contains(key) ? clock[key].dump() : "none"; };
      std::cout << "      trusted clock: " << number("mode") << ", " << number("calls_per_batch")
                << " calls per batch, ratio " << number("ratio") << " against a margin of " << number("margin")
                << (clock.value("unbounded", false) ? " (speed unproven)" : "") << std::endl;
      results.back()["trusted_clock"] = clock;
    }
    if (!suite_case.expected.empty() && !rejection) {
      // An exploit that got through: what the candidate's process observed is what says why.
      const nlohmann::json::json_pointer observations("/verification/details/observations");
      if (as_json.contains(observations))
        std::cout << "      observations: " << as_json.at(observations).dump().substr(0, 3000) << std::endl;
    }
    INFO(label << " -> " << as_json.dump(2).substr(0, 6000));
    if (suite_case.expected.empty()) {
      CHECK(evaluation.correct());
      if (suite_case.entry.value("timed", false)) CHECK(evaluation.profile);
    } else if (!rejection && std::find(suite_case.expected.begin(), suite_case.expected.end(),
                                       "correct_without_speed_reward") != suite_case.expected.end()) {
      // An exploit whose outputs are right whenever they are read, held by the trusted clock
      // to no more than an honest candidate gets: no speed reward.
      CHECK(evaluation.correct());
      CHECK(reward <= 1.0);
    } else {
      CHECK_FALSE(evaluation.correct());
      CHECK(std::find(suite_case.expected.begin(), suite_case.expected.end(), verdict) != suite_case.expected.end());
      if (!rejection) continue;
      // Every rejection says something a model can act on; a wrong value names where and what.
      CHECK(rejection->message.size() > 20);
      if (verdict == "value_mismatch" || verdict == "non_finite" || verdict == "nondeterministic") {
        CHECK_THAT(rejection->message, Catch::Matchers::Contains("index"));
        CHECK_THAT(rejection->message, Catch::Matchers::Contains("expected"));
      }
    }
  }
  std::filesystem::create_directories(report.parent_path());
  std::ofstream(report) << results.dump(1) << "\n";
}

}  // namespace cuda_agent::testing
