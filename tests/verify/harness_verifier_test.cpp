// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include "verify/verify_support.hpp"

#include <cuda_agent/evaluate/reward_policies.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

/// The CPU verifier and a compiler, with one candidate directory per call.
struct VerifierFixture {
  ca::testing::ScratchDirectory scratch{"verifier"};
  ca::HarnessVerifier verifier{ca::testing::harness_options("cpu")};
  std::shared_ptr<ca::CompileDriver<ca::ProcessSandbox>> compiler = ca::testing::test_compiler("cpu", scratch.path());
  int count = 0;

  ca::Candidate build(const std::string& model_new) {
    const fs::path root = scratch.path() / ("candidate-" + std::to_string(++count));
    ca::testing::assemble_candidate(root / "source", model_new, "cpu");
    ca::detail::make_open_directory(root / "build");
    const ca::CompileResult compiled = compiler->build(root / "source", root / "build");
    INFO(compiled.log);
    REQUIRE(compiled.succeeded);
    return {root / "source", root / "build"};
  }
};

std::string with_forward(const std::string& body) {
  std::string text = ca::testing::relu_model_new;
  const std::string old = "        return cuda_extension.relu(x)\n";
  return text.replace(text.find(old), old.size(), body);
}

}  // namespace

TEST_CASE("the harness verifier accepts a correct candidate and rejects wrong ones with actionable messages",
          "[python][verifier]") {
  VerifierFixture fixture;
  const ca::Task relu = ca::testing::adversarial_task("cpu", "relu");

  const auto started = std::chrono::steady_clock::now();
  const ca::VerificationResult correct = fixture.verifier.verify(relu, fixture.build(ca::testing::relu_model_new));
  INFO(nlohmann::json(correct).dump(2));
  CHECK(correct.correct);
  CHECK_FALSE(correct.rejection);
  // Two calls per set at least (the five requested, the second sparse set of the audit and
  // the near repeat of the first), one or two more on sets drawn at random: every call checked.
  CHECK((correct.checks_total == 15 || correct.checks_total == 16));
  CHECK(correct.checks_passed == correct.checks_total);
  CHECK(correct.details["plan"].size() == static_cast<std::size_t>(correct.checks_total));
  CHECK(correct.details["audit"]["degenerate"] == false);
  // No null model passes ReLU on its own inputs; heavy tails are added to every task, and two
  // sparse sets (the task's own inputs with one heavy-tailed element each). The heavy-tailed
  // set and the first sparse set take the unscaled places after the first; the second
  // sparse set is one more.
  const nlohmann::json heavy_tailed = {{"kind", "heavy_tailed"}, {"positive", false}};
  const nlohmann::json sparse = {{"kind", "sparse"}, {"stress", heavy_tailed}};
  CHECK(correct.details["audit"]["stress"] == nlohmann::json::array({heavy_tailed, sparse, sparse}));
  const auto& distributions = correct.details["distributions"];
  REQUIRE(distributions.size() == 6);
  CHECK(distributions == nlohmann::json::array({nullptr, heavy_tailed, sparse, nullptr, nullptr, sparse}));
  CHECK(std::count(distributions.begin(), distributions.end(), heavy_tailed) == 1);
  CHECK(std::count(distributions.begin(), distributions.end(), sparse) == 2);
  CHECK(std::count(distributions.begin(), distributions.end(), nullptr) == 3);
  CHECK(correct.details["tolerance"]["atol_scale"]["statistic"] == "rms");
  const auto seeds = correct.details["seeds"].get<std::vector<std::uint32_t>>();
  CHECK(std::set<std::uint32_t>(seeds.begin(), seeds.end()).size() == 6);
  CHECK(correct.details["scales"] == nlohmann::json::array({1.0, 1.0, 1.0, 2.0, 4.0, 1.0}));
  CHECK(correct.details["tolerance"]["default"]["atol"] == 1e-2);

  {  // every verification draws new seeds
    const ca::VerificationResult again = fixture.verifier.verify(relu, fixture.build(ca::testing::relu_model_new));
    CHECK(again.correct);
    CHECK(again.details["seeds"] != correct.details["seeds"]);
    CHECK(again.details["plan_seed"] != correct.details["plan_seed"]);
    CHECK(again.details["audit"]["cached"] == true);
    // Warm workers: a second verification costs what its own work costs.
    INFO("first "
         << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count()
         << " ms, second " << again.duration.count() << " ms");
    CHECK(again.duration < 60s);
  }
  {  // an off-by-one is reported at its index
    const auto result =
        fixture.verifier.verify(relu, fixture.build(with_forward("        return cuda_extension.relu_skip_last(x)\n")));
    INFO(nlohmann::json(result).dump(2));
    REQUIRE(result.rejection);
    // The last element is whatever the allocator handed out: the poison (non-finite), or by
    // chance a value that fits on one run but not the next (nondeterministic).
    CHECK((result.rejection->reason == ca::RejectionReason::non_finite ||
           result.rejection->reason == ca::RejectionReason::value_mismatch ||
           result.rejection->reason == ca::RejectionReason::nondeterministic));
    CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("(15, 1023)"));
    CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("expected"));
  }
  {  // torch compute inside forward is refused by name (by the grammar, before the guard sees it)
    const auto result = fixture.verifier.verify(relu, fixture.build(with_forward("        return x.clamp(min=0)\n")));
    REQUIRE(result.rejection);
    CHECK(result.rejection->reason == ca::RejectionReason::forbidden_operation);
    CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("x.clamp: .clamp() is not a tensor creation"));
  }
  {  // the static checks name file, line and rule
    const auto result = fixture.verifier.verify(relu, fixture.build(with_forward("        return torch.relu(x)\n")));
    REQUIRE(result.rejection);
    CHECK(result.rejection->reason == ca::RejectionReason::forbidden_operation);
    CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("model_new.py line 12"));
    CHECK(result.rejection->details["stage"] == "static_checks");
  }
  {  // a candidate that is not built is a load error
    const ca::Candidate built = fixture.build(ca::testing::relu_model_new);
    const auto result =
        fixture.verifier.verify(relu, ca::Candidate{built.source_directory, fixture.scratch.path() / "none"});
    REQUIRE(result.rejection);
    CHECK(result.rejection->reason == ca::RejectionReason::load_error);
  }
}

TEST_CASE("the reference worker cannot see candidates, and the candidate worker cannot change what it reads",
          "[python][verifier]") {
  VerifierFixture fixture;
  fixture.verifier.start();
  const fs::path work = fixture.verifier.options().work_directory;
  const fs::path candidates = work / "candidates";
  ca::testing::write_text(candidates / "probe" / "model_new.py", "secret");
  auto probe = [](ca::HarnessWorker& worker, const fs::path& path) {
    const ca::HarnessReply reply = worker.call("diagnose", {{"action", "probe"}, {"path", path.string()}}, 60s);
    REQUIRE(reply.has_result());
    return reply.result();
  };
  CHECK(probe(fixture.verifier.reference_worker(), candidates / "probe" / "model_new.py")["readable"] == false);
  CHECK(probe(fixture.verifier.candidate_worker(), candidates / "probe" / "model_new.py")["readable"] == true);
  CHECK(probe(fixture.verifier.candidate_worker(), candidates / "probe" / "model_new.py")["writable"] == false);
  CHECK(probe(fixture.verifier.candidate_worker(),
              work / "harness" / "cuda_agent_harness" / "verify" / "reference.py")["writable"] == false);
  CHECK(probe(fixture.verifier.candidate_worker(), work / "references")["writable"] == false);
  CHECK(probe(fixture.verifier.candidate_worker(), work / "sessions")["writable"] == false);
  // No network inside: only a loopback.
  const auto ping = fixture.verifier.candidate_worker().call("ping", nlohmann::json::object(), 60s);
  CHECK(ping.has_result());
}

TEST_CASE("the null-model audit tells a sound task from a degenerate one", "[python][verifier]") {
  ca::HarnessVerifier verifier{ca::testing::harness_options("cpu")};
  const nlohmann::json sound = verifier.audit(ca::testing::adversarial_task("cpu", "relu"));
  INFO(sound.dump(2));
  CHECK(sound["degenerate"] == false);
  CHECK(sound["null_models"]["passthrough"]["passes"] == false);

  ca::Task identity;
  identity.name = "identity_after_softmax";
  // The mean over a softmax axis is a constant: any candidate returning 1/n passes.
  identity.reference_source = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.softmax(x, dim=1).mean(dim=1) * 64

def get_inputs():
    return [torch.randn(8, 64)]

def get_init_inputs():
    return []
)";
  const nlohmann::json degenerate = verifier.audit(identity);
  INFO(degenerate.dump(2));
  CHECK(degenerate["degenerate"] == true);
  CHECK(degenerate["passing"].size() >= 1);
  // No stress distribution changes a constant output: the task is unfit to be scored.
  CHECK(degenerate["unfit"] == true);
  CHECK(degenerate["stress"].empty());
  CHECK_THAT(degenerate["message"].get<std::string>(), Catch::Matchers::Contains("constant"));
  CHECK(degenerate["cached"] == false);
  CHECK(verifier.audit(identity)["cached"] == true);

  // torch.rand inputs: a ReLU is the identity on them, so stress inputs are added.
  const nlohmann::json rand_relu = verifier.audit(ca::testing::adversarial_task("cpu", "relu_rand"));
  INFO(rand_relu.dump(2));
  CHECK(rand_relu["degenerate"] == true);
  CHECK(rand_relu["passing"] == nlohmann::json::array({"passthrough"}));
  CHECK(rand_relu["unfit"] == false);
  REQUIRE_FALSE(rand_relu["stress"].empty());
  const nlohmann::json sign_symmetric = {{"kind", "sign_symmetric"}, {"positive", false}};
  CHECK(rand_relu["stress"][0] == sign_symmetric);
  // Then heavy tails, and two sparse sets: torch.rand's values with one sign-symmetric element.
  const nlohmann::json sparse = {{"kind", "sparse"}, {"stress", sign_symmetric}};
  CHECK(rand_relu["stress"] ==
        nlohmann::json::array({sign_symmetric, {{"kind", "heavy_tailed"}, {"positive", false}}, sparse, sparse}));
}

TEST_CASE("audits are kept per task, harness and policy, in memory and in the cache directory", "[python][verifier]") {
  ca::testing::ScratchDirectory scratch("audit-cache");
  ca::HarnessOptions options = ca::testing::harness_options("cpu");
  options.audit_cache_directory = scratch.path() / "audits";
  const ca::Task relu = ca::testing::adversarial_task("cpu", "relu");
  {
    ca::HarnessVerifier verifier(options);
    CHECK(verifier.audit(relu)["cached"] == false);
    CHECK(verifier.audit(relu)["cached"] == true);
    verifier.policy().tolerance = ca::TolerancePolicy::strict();
    CHECK(verifier.audit(relu)["cached"] == false);  // another policy, another audit
  }
  int files = 0;
  for (const auto& entry : fs::directory_iterator(options.audit_cache_directory))
    files += entry.path().extension() == ".json";
  CHECK(files == 2);
  ca::HarnessVerifier another(options);
  const nlohmann::json again = another.audit(relu);
  CHECK(again["cached"] == true);  // from the directory: a new verifier does not audit again
  CHECK(again["degenerate"] == false);
}

TEST_CASE("a task unfit to be scored is rejected as task_unfit for every candidate, and never scored",
          "[python][verifier]") {
  VerifierFixture fixture;
  ca::Task constant;
  constant.name = "constant_output";
  constant.reference_source = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x) * 0 + 1

def get_inputs():
    return [torch.randn(16, 1024)]

def get_init_inputs():
    return []
)";
  for (const std::string& forward : {std::string("        return cuda_extension.relu(x)\n"),
                                     std::string("        return cuda_extension.zeros_like(x)\n")}) {
    const ca::VerificationResult result = fixture.verifier.verify(constant, fixture.build(with_forward(forward)));
    INFO(nlohmann::json(result).dump(2).substr(0, 4000));
    REQUIRE(result.rejection);
    CHECK(result.rejection->reason == ca::RejectionReason::task_unfit);
    CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("null model"));
    CHECK_THAT(result.rejection->message, Catch::Matchers::Contains("no verdict on the candidate"));
    CHECK(result.rejection->details["stage"] == "task_audit");
    ca::Evaluation evaluation;
    evaluation.compile.succeeded = true;
    evaluation.verification = result;
    CHECK_FALSE(evaluation.scored());
    const ca::Reward reward = ca::MilestoneReward{}.reward(evaluation);
    CHECK(reward.label == "unscored");
    CHECK_FALSE(reward.scored());
    CHECK(nlohmann::json(evaluation)["scored"] == false);
  }
}

TEST_CASE("stress inputs from the audit reject a copy of the input where the task's own inputs let it pass",
          "[python][verifier]") {
  VerifierFixture fixture;
  const ca::Task rand_relu = ca::testing::adversarial_task("cpu", "relu_rand");
  const ca::VerificationResult correct = fixture.verifier.verify(rand_relu, fixture.build(ca::testing::relu_model_new));
  INFO(nlohmann::json(correct).dump(2).substr(0, 4000));
  CHECK(correct.correct);
  CHECK(correct.details["distributions"][1] == nlohmann::json({{"kind", "sign_symmetric"}, {"positive", false}}));
  // sign-symmetric and heavy-tailed in the unscaled places, the two sparse sets after the scaled ones
  CHECK(correct.details["scales"] == nlohmann::json::array({1.0, 1.0, 1.0, 2.0, 4.0, 1.0, 1.0}));
  CHECK(correct.details["distributions"][5]["kind"] == "sparse");
  CHECK(correct.details["distributions"][6]["kind"] == "sparse");
  const ca::VerificationResult copy =
      fixture.verifier.verify(rand_relu, fixture.build(with_forward("        return cuda_extension.copy(x)\n")));
  REQUIRE(copy.rejection);
  CHECK(copy.rejection->reason == ca::RejectionReason::value_mismatch);
  CHECK_THAT(copy.rejection->message, Catch::Matchers::Contains("stress inputs"));
}

TEST_CASE("verification plans differ between verifications and a fixed plan seed reproduces one",
          "[python][verifier]") {
  VerifierFixture fixture;
  const ca::Task relu = ca::testing::adversarial_task("cpu", "relu");
  const ca::Candidate candidate = fixture.build(ca::testing::relu_model_new);
  std::set<std::string> plans;
  for (int i = 0; i < 4; ++i) {
    const ca::VerificationResult result = fixture.verifier.verify(relu, candidate);
    REQUIRE(result.correct);
    plans.insert(result.details["plan"].dump());
  }
  CHECK(plans.size() == 4);
  fixture.verifier.policy().plan_seed = 1234;
  fixture.verifier.policy().seeds = {1, 2, 3, 4, 5};
  const ca::VerificationResult first = fixture.verifier.verify(relu, candidate);
  const ca::VerificationResult second = fixture.verifier.verify(relu, candidate);
  CHECK(first.details["plan"] == second.details["plan"]);
  CHECK(first.details["plan_seed"] == 1234);
  // Every call on a set other than the one before, and the sets' calls add up.
  const nlohmann::json& plan = first.details["plan"];
  for (std::size_t i = 1; i < plan.size(); ++i) CHECK(plan[i]["set"] != plan[i - 1]["set"]);
}

TEST_CASE("cuda-agent eval prints a summary, writes the JSON result and reports the verdict in its exit status",
          "[python][verifier]") {
  ca::testing::ScratchDirectory scratch("eval-command");
  const fs::path program = fs::path(CUDA_AGENT_BINARY_DIR) / "examples" / "cuda-agent" / "cuda-agent";
  if (!fs::exists(program)) CUDA_AGENT_SKIP("the cuda-agent program was not built (CUDA_AGENT_BUILD_EXAMPLES off)");
  const fs::path task = ca::testing::adversarial_directory() / "tasks" / "cpu" / "relu.py";
  auto run = [&](const std::string& model_new, const std::string& name) {
    const fs::path candidate = ca::testing::assemble_candidate(scratch.path() / name, model_new, "cpu");
    ca::ProcessSpec spec;
    spec.argv = {program.string(),
                 "eval",
                 task.string(),
                 candidate.string(),
                 "--device",
                 "cpu",
                 "--json",
                 (scratch.path() / (name + ".json")).string(),
                 "--quiet",
                 "--python",
                 CUDA_AGENT_PYTHON,
                 "--cache-dir",
                 ca::testing::compile_cache_directory().string()};
    spec.environment = ca::Environment::from_current({"PATH", "HOME", "TMPDIR"});
    spec.timeout = std::chrono::minutes(15);
    return ca::run_process(spec);
  };
  const ca::ProcessResult correct = run(ca::testing::relu_model_new, "correct");
  INFO(correct.standard_output.text << correct.standard_error.text);
  CHECK(correct.exit_code == 0);
  CHECK_THAT(correct.standard_output.text, Catch::Matchers::Contains("CORRECT: 1"));
  CHECK_THAT(correct.standard_output.text, Catch::Matchers::Contains("each run 2 to "));
  for (const std::string line : {"task       ", "device     cpu", "build      ok", "result     CORRECT"})
    CHECK_THAT(correct.standard_output.text, Catch::Matchers::Contains(line));
  std::ifstream stream(scratch.path() / "correct.json");
  const nlohmann::json document = nlohmann::json::parse(stream);
  CHECK(document["evaluation"]["correct"] == true);
  CHECK(document["evaluation"]["verification"]["checks_passed"] ==
        document["evaluation"]["verification"]["checks_total"]);
  CHECK(document["evaluation"]["scored"] == true);
  CHECK(document["reward"]["label"] == "correct");

  const ca::ProcessResult wrong = run(with_forward("        return cuda_extension.zeros_like(x)\n"), "wrong");
  INFO(wrong.standard_output.text << wrong.standard_error.text);
  CHECK(wrong.exit_code == 1);
  CHECK_THAT(wrong.standard_output.text, Catch::Matchers::Contains("REJECTED (value_mismatch)"));
  CHECK_THAT(wrong.standard_output.text, Catch::Matchers::Contains("result     NOT CORRECT"));
  std::ifstream wrong_stream(scratch.path() / "wrong.json");
  const nlohmann::json rejected = nlohmann::json::parse(wrong_stream);
  CHECK(rejected["evaluation"]["correct"] == false);
  CHECK(rejected["evaluation"]["compile"]["succeeded"] == true);
  CHECK(rejected["rejection"]["reason"] == "value_mismatch");
  // What a model needs to fix it: where the first difference is, and both values.
  const std::string message = rejected["rejection"]["message"];
  CHECK_THAT(message, Catch::Matchers::Contains("at index ("));
  CHECK_THAT(message, Catch::Matchers::Contains("expected"));
  CHECK_THAT(message, Catch::Matchers::Contains("got 0"));
  CHECK_THAT(message, Catch::Matchers::Contains("The output is all zeros."));
  CHECK(rejected["rejection"]["details"].contains("index"));
}

TEST_CASE("the tolerance policy scales atol to the output's magnitude and says so in its JSON", "[verifier]") {
  const ca::TolerancePolicy paper = ca::TolerancePolicy::paper();
  CHECK((paper.for_output("float32", 3.0) == ca::Tolerance{1e-2, 1e-2}));  // order 1 and above: as given
  CHECK((paper.for_output("float32", 1.0) == ca::Tolerance{1e-2, 1e-2}));
  CHECK(paper.for_output("float32", 2e-4).atol == Approx(2e-6));
  CHECK(paper.for_output("float32", 2e-4).rtol == 1e-2);
  CHECK(paper.for_output("float32", 0.0).atol == Approx(1e-2 * paper.atol_scale.floor));
  const ca::TolerancePolicy strict = ca::TolerancePolicy::strict();
  CHECK(strict.for_output("float32", 0.5).atol == Approx(5e-5));
  CHECK(strict.for_output("float16", 0.5).atol == Approx(5e-3));

  const nlohmann::json json = strict;
  CHECK(json["atol_scale"] == nlohmann::json({{"statistic", "rms"}, {"floor", 1e-5}, {"ceiling", 1.0}}));
  CHECK(json.get<ca::TolerancePolicy>() == strict);
  // A policy written before atol followed the magnitude keeps atol as given.
  const auto older = nlohmann::json::parse(R"({"default": {"atol": 0.01, "rtol": 0.01}})").get<ca::TolerancePolicy>();
  CHECK_FALSE(older.atol_scale.enabled);
  CHECK((older.for_output("float32", 1e-4) == ca::Tolerance{1e-2, 1e-2}));
  CHECK_FALSE(nlohmann::json(older).contains("atol_scale"));
}

TEST_CASE("running out of device memory the evaluation itself took is the harness's error, never the candidate's",
          "[verifier]") {
  constexpr std::uint64_t gib = std::uint64_t{1} << 30;
  const std::string out_of_memory =
      "ModelNew.forward raised on call 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB";
  // 19_ReLU on an 80 GiB device with the expected outputs on the device: 30 GiB held by the
  // reference, 6 GiB inputs and outputs placed for the candidate.
  const nlohmann::json crowded = {{"held_device_bytes", 30 * gib},
                                  {"input_bytes", 6 * gib},
                                  {"output_bytes", 6 * gib},
                                  {"device_total_bytes", 80 * gib}};
  const auto blamed = ca::detail::evaluator_out_of_memory(ca::RejectionReason::runtime_error, out_of_memory, crowded);
  REQUIRE(blamed);
  CHECK(blamed->find("60.0 GiB of its 80.0 GiB") != std::string::npos);
  CHECK(blamed->find("not judged") != std::string::npos);
  CHECK(ca::detail::evaluator_out_of_memory(ca::RejectionReason::crashed, "the candidate process failed: out of memory",
                                            crowded));

  // With the expected outputs on the host the evaluation takes 30 of 80 GiB: the candidate's.
  nlohmann::json lean = crowded;
  lean["held_device_bytes"] = 0;
  CHECK_FALSE(ca::detail::evaluator_out_of_memory(ca::RejectionReason::runtime_error, out_of_memory, lean));
  // Only an out-of-memory failure, and only where the reference's report tells the device.
  CHECK_FALSE(
      ca::detail::evaluator_out_of_memory(ca::RejectionReason::value_mismatch, "out of memory in a message", crowded));
  CHECK_FALSE(
      ca::detail::evaluator_out_of_memory(ca::RejectionReason::runtime_error, "ValueError: bad shape", crowded));
  nlohmann::json cpu = crowded;
  cpu.erase("device_total_bytes");
  CHECK_FALSE(ca::detail::evaluator_out_of_memory(ca::RejectionReason::runtime_error, out_of_memory, cpu));
  CHECK_FALSE(ca::detail::evaluator_out_of_memory(ca::RejectionReason::runtime_error, out_of_memory, nullptr));
}
