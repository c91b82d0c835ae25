// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/evaluation.hpp>
#include <cuda_agent/evaluation_policy.hpp>
#include <cuda_agent/task.hpp>

#include <stdexcept>
#include <string>

namespace ca = cuda_agent;

TEST_CASE("rejection reasons have stable names that round-trip", "[evaluation]") {
  for (const auto& [reason, name] : ca::detail::rejection_reason_names) {
    CHECK(ca::to_string(reason) == name);
    CHECK(ca::parse_rejection_reason(name) == reason);
  }
  CHECK(ca::to_string(ca::RejectionReason::value_mismatch) == "value_mismatch");
  CHECK_FALSE(ca::parse_rejection_reason("close_enough"));
}

TEST_CASE("verification results are read from the harness's JSON", "[evaluation]") {
  const auto passed = nlohmann::json::parse(
      R"({"correct":true,"rejection":null,"checks_passed":5,"checks_total":5,"duration_ms":412})");
  const auto accepted = passed.get<ca::VerificationResult>();
  CHECK(accepted.correct);
  CHECK_FALSE(accepted.rejection);
  CHECK(accepted.duration == std::chrono::milliseconds(412));

  const auto failed = nlohmann::json::parse(R"json({"correct":false,"checks_passed":2,"checks_total":5,
      "rejection":{"reason":"value_mismatch","message":"output 0 differs at index (3, 17)","details":{"index":[3,17]}}})json");
  const auto rejected = failed.get<ca::VerificationResult>();
  REQUIRE(rejected.rejection);
  CHECK(rejected.rejection->reason == ca::RejectionReason::value_mismatch);
  CHECK(rejected.rejection->details["index"][1] == 17);

  // A harness that says "incorrect" without saying why is itself at fault.
  const auto silent = nlohmann::json::parse(R"({"correct":false})").get<ca::VerificationResult>();
  REQUIRE(silent.rejection);
  CHECK(silent.rejection->reason == ca::RejectionReason::harness_error);

  // Unknown reason codes are not silently mapped to something plausible.
  const auto unknown = nlohmann::json::parse(R"({"correct":false,"rejection":{"reason":"vibes","message":"m"}})")
                           .get<ca::VerificationResult>();
  CHECK(unknown.rejection->reason == ca::RejectionReason::harness_error);
  CHECK(unknown.rejection->message.find("unknown reason 'vibes'") != std::string::npos);

  const nlohmann::json again = rejected;
  CHECK(again.get<ca::VerificationResult>().rejection->message == rejected.rejection->message);
}

TEST_CASE("an evaluation is correct only if every stage says so", "[evaluation]") {
  ca::Evaluation evaluation;
  CHECK_FALSE(evaluation.correct());
  CHECK(evaluation.rejection()->reason == ca::RejectionReason::compile_error);

  evaluation.compile.succeeded = true;
  CHECK_FALSE(evaluation.correct());  // not yet verified

  evaluation.verification = ca::VerificationResult{};
  evaluation.verification->rejection = ca::Rejection{ca::RejectionReason::input_mutated, "input 0 changed", {}};
  CHECK(evaluation.rejection()->reason == ca::RejectionReason::input_mutated);

  evaluation.verification = ca::VerificationResult{true, std::nullopt, 5, 5, {}, {}};
  CHECK(evaluation.correct());
  CHECK_FALSE(evaluation.rejection());

  evaluation.profile = ca::ProfileResult{};
  evaluation.profile->rejection = ca::Rejection{ca::RejectionReason::timed_output_mismatch, "iteration 7", {}};
  CHECK_FALSE(evaluation.correct());
  CHECK(evaluation.rejection()->reason == ca::RejectionReason::timed_output_mismatch);

  const nlohmann::json json = evaluation;
  CHECK(json["correct"] == false);
  CHECK(json["profile"]["rejection"]["reason"] == "timed_output_mismatch");
}

TEST_CASE("diagnostics and timing statistics round-trip", "[evaluation]") {
  const ca::Diagnostic diagnostic{"kernels/relu.cu", 12, 5, ca::DiagnosticSeverity::warning, "unused variable"};
  const auto diagnostic_back = nlohmann::json(diagnostic).get<ca::Diagnostic>();
  CHECK(diagnostic_back.file == diagnostic.file);
  CHECK(diagnostic_back.line == 12);
  CHECK(diagnostic_back.severity == ca::DiagnosticSeverity::warning);

  const ca::TimingStats stats{"eager", 50, 2, 120.5, 121.0, 118.0, 130.0, 119.0, 122.0};
  const auto stats_back = nlohmann::json(stats).get<ca::TimingStats>();
  CHECK(stats_back.samples == 50);
  CHECK(stats_back.discarded == 2);
  CHECK(stats_back.q3_us == 122.0);
  CHECK(ca::to_string(ca::Verdict::ambiguous) == "AMBIGUOUS");
}

TEST_CASE("a task's content hash depends on the reference only", "[evaluation]") {
  ca::Task relu{"level1/19_ReLU", "class Model: ...", ca::TaskOrigin::kernelbench_file, {}, {}};
  ca::Task renamed = relu;
  renamed.name = "elsewhere/relu";
  renamed.candidate_files["model_new.py"] = "class ModelNew: ...";
  CHECK(relu.content_hash() == renamed.content_hash());
  CHECK(relu.content_hash().size() == 64);

  ca::Task changed = relu;
  changed.reference_source += " ";
  CHECK(changed.content_hash() != relu.content_hash());
}

TEST_CASE("a request's evaluation policy round-trips, and one no evaluator could apply names its field",
          "[evaluation]") {
  CHECK(ca::tolerance_profile("default") == ca::TolerancePolicy::paper());
  CHECK(ca::tolerance_profile("strict") == ca::TolerancePolicy::strict());
  CHECK_FALSE(ca::tolerance_profile("loose"));

  ca::EvaluationPolicy policy;
  CHECK(nlohmann::json(policy) == nlohmann::json::object());
  policy.tolerance = "strict";
  policy.libraries = ca::LibraryPolicy{};
  policy.libraries->cudnn = false;
  policy.timing_seconds = 1.5;
  policy.timing_max_rounds = 60;
  const nlohmann::json written = policy;
  CHECK(written["timing_budget"] == nlohmann::json{{"seconds", 1.5}, {"max_rounds", 60}});
  CHECK(written.get<ca::EvaluationPolicy>() == policy);
  // What a service keeps to itself rides along, unread.
  nlohmann::json with_host_keys = written;
  with_host_keys["reward"] = "speedup";
  with_host_keys["device"] = "cuda";
  CHECK(with_host_keys.get<ca::EvaluationPolicy>() == policy);

  const auto refusal = [](const nlohmann::json& json) {
    try {
      (void)json.get<ca::EvaluationPolicy>();
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  CHECK(refusal({{"tolerance", "loose"}}).find("policy.tolerance") != std::string::npos);
  CHECK(refusal({{"tolerance", 3}}).find("policy") != std::string::npos);
  CHECK(refusal({{"timing_budget", {{"seconds", 0}}}}).find("policy.timing_budget.seconds") != std::string::npos);
  CHECK(refusal({{"timing_budget", {{"max_rounds", 0}}}}).find("policy.timing_budget.max_rounds") != std::string::npos);
  CHECK(refusal({{"libraries", "none"}}).find("policy.libraries") != std::string::npos);
  CHECK(refusal(nlohmann::json::array()) != "accepted");
}
