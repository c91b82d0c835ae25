// SPDX-License-Identifier: Apache-2.0
#pragma once

// Runs the candidates of tests/adversarial/manifest.json through the trusted evaluation
// (static checks, build, verification) on one device and checks each verdict against the
// manifest: exploits must be rejected with one of the listed reasons, legitimate tricky
// candidates must be accepted. Candidates listed with "without_static_checks" are run a
// second time with the static checks off, so that the dynamic checks behind them are
// tested on their own.
//
// Two environment variables narrow a run down when one case needs a closer look:
//   CUDA_AGENT_ADVERSARIAL_ONLY=name,name   only these candidates
//   CUDA_AGENT_ADVERSARIAL_PREPARED_CHILDREN=0   the verifier's workers fork each
//       verification's processes when its request comes, not ahead of it
//       (HarnessOptions::prepared_children, on by default)

#include "catch.hpp"

#include "verify/verify_support.hpp"

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
/// that must be rejected (with and without the static checks).
inline std::vector<SuiteCase> suite_cases(const std::string& device, bool accept) {
  std::vector<std::string> only;
  if (const char* names = std::getenv("CUDA_AGENT_ADVERSARIAL_ONLY")) {
    std::istringstream list(names);
    for (std::string name; std::getline(list, name, ',');)
      if (!name.empty()) only.push_back(name);
  }
  std::vector<SuiteCase> cases;
  const nlohmann::json manifest = load_manifest();
  for (const nlohmann::json& entry : manifest["candidates"]) {
    if (!entry.contains(device)) continue;
    if (!only.empty() && std::find(only.begin(), only.end(), entry["name"].get<std::string>()) == only.end()) continue;
    const nlohmann::json& expect = entry[device]["expect"];
    const bool correct = expect.is_string() && expect == "correct";
    if (correct != accept) continue;
    SuiteCase main{entry, entry["name"], correct ? std::vector<std::string>{} : expect.get<std::vector<std::string>>(), true};
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
/// when present) and its own kernels (kernels.<device>/) or else the shared toolbox.
inline std::filesystem::path assemble_suite_candidate(const nlohmann::json& entry, const std::string& device,
                                                      const std::filesystem::path& into) {
  const std::filesystem::path source = adversarial_directory() / "candidates" / entry["name"].get<std::string>();
  std::filesystem::path model = source / ("model_new." + device + ".py");
  if (!std::filesystem::exists(model)) model = source / "model_new.py";
  std::ifstream stream(model);
  const std::string text{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  const std::filesystem::path own = source / ("kernels." + device);
  return assemble_candidate(into, text, device, std::filesystem::exists(own) ? own : std::filesystem::path());
}

/// Evaluates every case and checks its verdict; writes a JSON report to `report`.
inline void run_suite(const std::string& device, bool accept, const std::filesystem::path& report) {
  const std::vector<SuiteCase> cases = suite_cases(device, accept);
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
  TrustedEvaluator<HarnessVerifier, ProcessSandbox> evaluator(test_compiler(device, scratch.path()),
                                                              HarnessVerifier(options), std::nullopt, evaluator_options);
  const VerificationPolicy defaults = evaluator.verifier().policy();
  nlohmann::json results = nlohmann::json::array();
  int index = 0;
  for (const SuiteCase& suite_case : cases) {
    VerificationPolicy& policy = evaluator.verifier().policy();
    policy = defaults;
    policy.static_checks = suite_case.static_checks;
    const nlohmann::json settings = suite_case.entry.value("policy", nlohmann::json::object());
    if (settings.value("tolerance", "") == "strict") policy.tolerance = TolerancePolicy::strict();
    if (settings.contains("timeout_s")) policy.timeout = std::chrono::seconds(settings["timeout_s"].get<int>());
    const Task task = adversarial_task(device, suite_case.entry["task"]);
    const std::filesystem::path directory =
        assemble_suite_candidate(suite_case.entry, device, scratch.path() / "candidates" / std::to_string(++index));
    const auto started = std::chrono::steady_clock::now();
    const Evaluation evaluation = evaluator.evaluate(task, directory);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const std::optional<Rejection> rejection = evaluation.rejection();
    const std::string verdict = rejection ? std::string(to_string(rejection->reason)) : "correct";
    const std::string label = suite_case.name + (suite_case.static_checks ? "" : " (without static checks)");
    std::cout << "  " << label << ": " << verdict << " in " << seconds << " s"
              << (rejection ? "\n      " + rejection->message.substr(0, 300) : std::string()) << std::endl;
    results.push_back({{"candidate", suite_case.name}, {"static_checks", suite_case.static_checks},
                       {"catalog", suite_case.entry["catalog"]}, {"verdict", verdict},
                       {"message", rejection ? rejection->message : ""}, {"seconds", seconds},
                       {"expected", suite_case.expected.empty() ? nlohmann::json("correct") : nlohmann::json(suite_case.expected)}});
    const nlohmann::json as_json = evaluation;
    if (!suite_case.expected.empty() && !rejection) {
      // An exploit that got through: what the candidate's process observed is what says why.
      const nlohmann::json::json_pointer observations("/verification/details/observations");
      if (as_json.contains(observations))
        std::cout << "      observations: " << as_json.at(observations).dump().substr(0, 3000) << std::endl;
    }
    INFO(label << " -> " << as_json.dump(2).substr(0, 6000));
    if (suite_case.expected.empty()) {
      CHECK(evaluation.correct());
    } else {
      CHECK_FALSE(evaluation.correct());
      CHECK(std::find(suite_case.expected.begin(), suite_case.expected.end(), verdict) != suite_case.expected.end());
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
