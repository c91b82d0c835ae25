// SPDX-License-Identifier: Apache-2.0
// The hand-written KernelBench candidates (tests/gpu_candidates/<level>/<task>/<variant>/):
// on the GPU, each task's "correct" variant must verify and every other variant (subtly
// broken: off by one, a missing boundary check, a wrong reduction, a race) must be
// rejected with a message that says what is wrong. Also the null-model audit of every
// KernelBench task. Reports go to <build>/gpu_candidates/.
#include "catch.hpp"

#include "verify/verify_support.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

namespace ca = cuda_agent;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> candidate_directories() {
  std::vector<fs::path> found;
  const fs::path root = ca::testing::source_directory() / "tests" / "gpu_candidates";
  if (!fs::is_directory(root)) return found;
  const char* filter = std::getenv("CUDA_AGENT_GPU_CANDIDATES_FILTER");
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().filename() != "model_new.py") continue;
    const fs::path directory = entry.path().parent_path();
    if (fs::relative(directory, root).begin()->string().rfind("level", 0) != 0) continue;
    if (filter && *filter && fs::relative(directory, root).string().find(filter) == std::string::npos) continue;
    found.push_back(directory);
  }
  std::sort(found.begin(), found.end());
  return found;
}

fs::path report_directory() { return fs::path(CUDA_AGENT_BINARY_DIR) / "gpu_candidates"; }

}  // namespace

TEST_CASE("hand-written KernelBench candidates: correct ones verify, broken ones are rejected with a useful message",
          "[gpu][candidates]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  const std::vector<fs::path> candidates = candidate_directories();
  if (candidates.empty()) CUDA_AGENT_SKIP("no candidates under tests/gpu_candidates (or none match the filter)");
  ca::testing::ScratchDirectory scratch("gpu-candidates");
  ca::HarnessOptions options = ca::testing::harness_options("cuda");
  options.work_directory = scratch.path() / "harness";
  ca::TrustedEvaluatorOptions evaluator_options;
  evaluator_options.work_directory = scratch.path() / "evaluations";
  ca::TrustedEvaluator<ca::HarnessVerifier, ca::ProcessSandbox> evaluator(
      ca::testing::test_compiler("cuda", scratch.path()), ca::HarnessVerifier(options), std::nullopt,
      evaluator_options);

  nlohmann::json report = nlohmann::json::array();
  int correct_verified = 0, broken_rejected = 0;
  std::set<std::string> unfit_tasks;
  for (const fs::path& directory : candidates) {
    const fs::path task_directory = directory.parent_path();
    const std::string level = task_directory.parent_path().filename().string();
    const std::string variant = directory.filename().string();
    const fs::path task_file = ca::testing::source_directory() / "tests" / "data" / "kernelbench" / level /
                               (task_directory.filename().string() + ".py");
    INFO(directory.string());
    REQUIRE(fs::exists(task_file));
    const ca::Task task = ca::testing::task_from_file(task_file);
    const auto started = std::chrono::steady_clock::now();
    const ca::Evaluation evaluation = evaluator.evaluate(task, directory);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const auto rejection = evaluation.rejection();
    const std::string verdict = rejection ? std::string(ca::to_string(rejection->reason)) : "correct";
    std::cout << "  " << level << "/" << task_directory.filename().string() << "/" << variant << ": " << verdict << " ("
              << seconds << " s)" << (rejection ? "\n      " + rejection->message.substr(0, 400) : std::string())
              << std::endl;
    report.push_back({{"candidate", fs::relative(directory, ca::testing::source_directory()).string()},
                      {"variant", variant},
                      {"verdict", verdict},
                      {"message", rejection ? rejection->message : ""},
                      {"seconds", seconds},
                      {"verify_ms", evaluation.verification ? evaluation.verification->duration.count() : 0},
                      {"build_ms", evaluation.compile.duration.count()}});
    INFO(nlohmann::json(evaluation).dump(2).substr(0, 8000));
    if (rejection && rejection->reason == ca::RejectionReason::task_unfit) {
      // The task's audit found a null model that passes every input distribution: no
      // candidate of it, correct or broken, gets a verdict. That is a fact about the task,
      // checked to be consistent: the audit says so, and nothing is scored.
      const nlohmann::json audit = evaluator.verifier().audit(task);
      CHECK(audit["unfit"] == true);
      CHECK_FALSE(evaluation.scored());
      unfit_tasks.insert(level + "/" + task_directory.filename().string());
      continue;
    }
    if (variant == "correct") {
      CHECK(evaluation.correct());
      correct_verified += evaluation.correct();
    } else {
      REQUIRE(rejection);
      // Broken on purpose, but built: the verifier, not the compiler, must catch it.
      CHECK(rejection->reason != ca::RejectionReason::compile_error);
      CHECK(rejection->reason != ca::RejectionReason::harness_error);
      CHECK(rejection->message.size() > 20);
      broken_rejected += rejection->reason != ca::RejectionReason::harness_error;
    }
  }
  fs::create_directories(report_directory());
  std::ofstream(report_directory() / "verdicts.json") << report.dump(1) << "\n";
  std::cout << correct_verified << " correct candidates verified, " << broken_rejected
            << " broken ones rejected; report in " << (report_directory() / "verdicts.json").string() << std::endl;
  std::cout << unfit_tasks.size() << " tasks unfit to be scored (their candidates get task_unfit):";
  for (const std::string& name : unfit_tasks) std::cout << " " << name;
  std::cout << std::endl;
}

TEST_CASE("every KernelBench task tells a real implementation from a null model (audit)", "[gpu][slow][candidates]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::HarnessVerifier verifier(ca::testing::harness_options("cuda"));
  nlohmann::json report = nlohmann::json::object();
  std::vector<std::string> degenerate;
  std::vector<std::string> unfit;
  int audited = 0;
  for (const std::string level : {"level1", "level2", "level3"}) {
    for (const ca::Task& task :
         ca::load_kernelbench_tasks(ca::testing::source_directory() / "tests" / "data" / "kernelbench" / level)) {
      try {
        const nlohmann::json audit = verifier.audit(task);
        report[task.name] = audit;
        ++audited;
        if (audit.value("degenerate", false))
          degenerate.push_back(task.name + " (" + audit["passing"].dump() + "; stress " + audit["stress"].dump() + ")");
        if (audit.value("unfit", false)) unfit.push_back(task.name + " (" + audit["still_passing"].dump() + ")");
        // A task that needs stress inputs gets some unless it is unfit: never both missing.
        CHECK((!audit.value("degenerate", false) || audit.value("unfit", false) || !audit["stress"].empty()));
      } catch (const std::exception& error) {
        report[task.name] = {{"error", error.what()}};
      }
    }
  }
  fs::create_directories(report_directory());
  std::ofstream(report_directory() / "kernelbench_audit.json") << report.dump(1) << "\n";
  std::cout << audited << " KernelBench tasks audited; " << degenerate.size() << " accept a null model:" << std::endl;
  for (const std::string& name : degenerate) std::cout << "  " << name << std::endl;
  std::cout << unfit.size()
            << " of them unfit to be scored (no stress distribution separates the null models):" << std::endl;
  for (const std::string& name : unfit) std::cout << "  " << name << std::endl;
  // Degenerate KernelBench tasks are facts about the dataset, reported, not failures.
  CHECK(audited > 200);
}
