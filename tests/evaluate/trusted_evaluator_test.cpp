// SPDX-License-Identifier: Apache-2.0
// The trusted evaluation as the shipped hosts hold it (`cuda-agent eval`, `optimize` and
// the agent loop: one HarnessVerifier shared through SharedVerifier): the static checks
// run before anything is built, so a candidate with a forbidden construct is rejected for
// it even when its sources would not compile, and no compiler runs.
#include "catch.hpp"

#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>  // geteuid

#include "verify/verify_support.hpp"

namespace ca = cuda_agent;

namespace {

// The shipped hosts' verifier: the evaluator stages follow what it models.
using ShippedVerifier = ca::SharedVerifier<ca::HarnessVerifier>;
static_assert(ca::PrescreeningVerifier<ShippedVerifier>);
static_assert(ca::LibraryPolicyVerifier<ShippedVerifier>);

/// Runs each command in a ProcessSandbox and records its argv: every command the compile
/// driver runs (compiler, linker, build tool) goes through its sandbox.
struct RecordingSandbox {
  ca::ProcessSandbox sandbox;
  std::shared_ptr<std::vector<std::vector<std::string>>> commands;

  ca::CommandResult run(const ca::Command& command) {
    commands->push_back(command.argv);
    return sandbox.run(command);
  }
};
static_assert(ca::Sandbox<RecordingSandbox>);

std::shared_ptr<ca::CompileDriver<RecordingSandbox>> recording_compiler(
    const std::filesystem::path& workspace, std::shared_ptr<std::vector<std::vector<std::string>>> commands) {
  ca::SandboxOptions sandbox;
  sandbox.workspace = workspace;
  ca::CompileOptions options;
  options.device = "cpu";
  options.python = CUDA_AGENT_PYTHON;
  options.cache_directory = ca::testing::compile_cache_directory();
  if (::geteuid() == 0) options.sandbox_user = ca::UserIdentity{65534, 65534};
  return std::make_shared<ca::CompileDriver<RecordingSandbox>>(
      RecordingSandbox{ca::ProcessSandbox(sandbox), std::move(commands)}, options);
}

// Does not compile (an undeclared name), whatever else it does.
std::string broken_kernel(bool forbidden, const std::string& token) {
  std::string text = "#include <torch/extension.h>\n";
  if (forbidden) text += "#include <thread>\n\nvoid spin() { std::thread worker([] {}); worker.join(); }\n";
  text += "\nint broken_" + token + "() { return undeclared_name_" + token + "; }\n";
  return text;
}

}  // namespace

TEST_CASE("a forbidden construct is rejected by the static checks before anything is built", "[python][evaluate]") {
  ca::testing::ScratchDirectory scratch("trusted-prescreen");
  auto commands = std::make_shared<std::vector<std::vector<std::string>>>();
  auto verifier = std::make_shared<ca::HarnessVerifier>(ca::testing::harness_options("cpu"));
  ca::TrustedEvaluator<ShippedVerifier, RecordingSandbox> evaluator(recording_compiler(scratch.path(), commands),
                                                                    ShippedVerifier(verifier));
  const ca::Task relu = ca::testing::adversarial_task("cpu", "relu");
  const std::string token = ca::detail::random_hex(6);

  SECTION("forbidden and broken: the static-check rejection, and no compiler ran") {
    const std::filesystem::path candidate =
        ca::testing::assemble_candidate(scratch.path() / "forbidden", ca::testing::relu_model_new, "cpu");
    ca::testing::write_text(candidate / "kernels" / "spin.cpp", broken_kernel(true, token));

    const ca::Evaluation evaluation = evaluator.evaluate(relu, candidate);
    INFO(nlohmann::json(evaluation).dump(1).substr(0, 4000));
    CHECK(commands->empty());
    CHECK_FALSE(evaluation.compile.succeeded);
    CHECK(evaluation.compile.log.find("not built") != std::string::npos);
    REQUIRE(evaluation.verification);
    REQUIRE(evaluation.verification->rejection);
    CHECK(evaluation.verification->rejection->reason == ca::RejectionReason::forbidden_construct);
    CHECK(evaluation.verification->rejection->details["stage"] == "static_checks");
    CHECK_FALSE(evaluation.correct());
  }

  SECTION("broken only: the compiler runs and reports the error") {
    const std::filesystem::path candidate =
        ca::testing::assemble_candidate(scratch.path() / "broken", ca::testing::relu_model_new, "cpu");
    ca::testing::write_text(candidate / "kernels" / "spin.cpp", broken_kernel(false, token));

    const ca::Evaluation evaluation = evaluator.evaluate(relu, candidate);
    INFO(nlohmann::json(evaluation).dump(1).substr(0, 4000));
    CHECK_FALSE(commands->empty());
    CHECK_FALSE(evaluation.compile.succeeded);
    CHECK(evaluation.compile.log.find("undeclared_name_" + token) != std::string::npos);
    CHECK_FALSE(evaluation.verification);
  }
}
