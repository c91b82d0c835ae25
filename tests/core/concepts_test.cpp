// SPDX-License-Identifier: Apache-2.0
// Conforming types satisfy each component concept, types missing a member do not, and
// the type-erased wrappers forward to what they hold.
#include "catch.hpp"

#include <cuda_agent/evaluator.hpp>
#include <cuda_agent/llm_client.hpp>
#include <cuda_agent/profiler.hpp>
#include <cuda_agent/reward_policy.hpp>
#include <cuda_agent/sandbox.hpp>
#include <cuda_agent/tool.hpp>
#include <cuda_agent/verifier.hpp>

#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ca = cuda_agent;

namespace {

// --- LlmClient ---------------------------------------------------------------------------
struct EchoClient {
  int* calls = nullptr;
  std::string_view name() const { return "echo"; }
  ca::ChatResponse complete(const ca::ChatRequest& request) {
    if (calls) ++*calls;
    ca::ChatResponse response;
    response.message = ca::Message::assistant("echo: " + request.messages.back().content);
    response.finish_reason = ca::FinishReason::stop;
    response.usage.prompt_tokens = 3;
    return response;
  }
};
struct ClientWithoutName {
  ca::ChatResponse complete(const ca::ChatRequest&) { return {}; }
};
struct ClientReturningMessage {
  std::string_view name() const { return "wrong"; }
  ca::Message complete(const ca::ChatRequest&) { return {}; }
};
static_assert(ca::LlmClient<EchoClient>);
static_assert(!ca::LlmClient<ClientWithoutName>);
static_assert(!ca::LlmClient<ClientReturningMessage>);
static_assert(!ca::LlmClient<int>);

// Refinement: ResumableLlmClient.
struct ResumableEcho : EchoClient {
  int skipped = 0;
  void resume_after(int turns) { skipped = turns; }
};
struct ResumableWithoutClient {
  void resume_after(int) {}
};
static_assert(ca::ResumableLlmClient<ResumableEcho>);
static_assert(!ca::ResumableLlmClient<EchoClient>);
static_assert(!ca::ResumableLlmClient<ResumableWithoutClient>);

// --- Tool ----------------------------------------------------------------------------------
struct UpperTool {
  std::string_view name() const { return "upper"; }
  std::string_view description() const { return "Upper-cases `text`."; }
  nlohmann::json parameters() const {
    return {{"type", "object"}, {"properties", {{"text", {{"type", "string"}}}}}, {"required", {"text"}}};
  }
  ca::ToolResult invoke(const nlohmann::json& arguments, ca::ToolContext&) {
    if (!arguments.contains("text")) return ca::ToolResult::error("missing text");
    std::string text = arguments["text"].get<std::string>();
    for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return ca::ToolResult::success(text);
  }
};
struct ThrowingTool {
  std::string_view name() const { return "broken"; }
  std::string_view description() const { return "Always throws."; }
  nlohmann::json parameters() const { return {{"type", "object"}}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext&) { throw std::runtime_error("internal fault"); }
};
struct ToolWithoutDescription {
  std::string_view name() const { return "x"; }
  nlohmann::json parameters() const { return {}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext&) { return {}; }
};
struct ToolWithMutableName {  // name() must be callable on a const tool
  std::string_view name() { return "x"; }
  std::string_view description() const { return "x"; }
  nlohmann::json parameters() const { return {}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext&) { return {}; }
};
static_assert(ca::Tool<UpperTool>);
static_assert(!ca::Tool<ToolWithoutDescription>);
static_assert(!ca::Tool<ToolWithMutableName>);

// --- Sandbox -------------------------------------------------------------------------------
struct RecordingSandbox {
  std::vector<std::string>* seen;
  ca::CommandResult run(const ca::Command& command) {
    seen->push_back(command.argv.front());
    ca::CommandResult result;
    result.exit_code = 0;
    result.sandbox = "recording";
    return result;
  }
};
struct SandboxReturningProcessResult {
  ca::ProcessResult run(const ca::Command&) { return {}; }
};
static_assert(ca::Sandbox<RecordingSandbox>);
static_assert(!ca::Sandbox<SandboxReturningProcessResult>);

// --- Verifier and Profiler -------------------------------------------------------------------
struct AcceptAll {
  ca::VerificationResult verify(const ca::Task&, const ca::Candidate&) {
    ca::VerificationResult result;
    result.correct = true;
    result.checks_passed = result.checks_total = 5;
    return result;
  }
};
struct VerifierWithWrongArguments {
  ca::VerificationResult verify(const ca::Candidate&) { return {}; }
};
struct FixedProfiler {
  ca::ProfileResult profile(const ca::Task&, const ca::Candidate&) {
    ca::ProfileResult result;
    result.timings.push_back({"candidate", 10, 0, 100.0, 100.0, 99.0, 101.0, 99.5, 100.5});
    return result;
  }
};
static_assert(ca::Verifier<AcceptAll>);
static_assert(!ca::Verifier<VerifierWithWrongArguments>);
static_assert(ca::Profiler<FixedProfiler>);
static_assert(!ca::Profiler<AcceptAll>);

// --- RewardPolicy ------------------------------------------------------------------------------
struct CorrectOnly {
  std::string_view name() const { return "correct-only"; }
  ca::Reward reward(const ca::Evaluation& evaluation) const {
    return evaluation.correct() ? ca::Reward{1, "correct", "verified"} : ca::Reward{0, "incorrect", "rejected"};
  }
};
struct PolicyWithNonConstReward {  // reward() must be callable on a const policy
  std::string_view name() const { return "x"; }
  ca::Reward reward(const ca::Evaluation&) { return {}; }
};
static_assert(ca::RewardPolicy<CorrectOnly>);
static_assert(!ca::RewardPolicy<PolicyWithNonConstReward>);

// --- Evaluator -----------------------------------------------------------------------------------
struct CountingEvaluator {
  int* calls;
  ca::Evaluation evaluate(const ca::Task& task, const std::filesystem::path& directory) {
    ++*calls;
    ca::Evaluation evaluation;
    evaluation.compile.log = task.name + " in " + directory.string();
    return evaluation;
  }
};
struct EvaluatorTakingCandidate {
  ca::Evaluation evaluate(const ca::Task&, const ca::Candidate&) { return {}; }
};
static_assert(ca::Evaluator<CountingEvaluator>);
static_assert(!ca::Evaluator<EvaluatorTakingCandidate>);

// --- Verifier refinements ------------------------------------------------------------------
struct RejectsEverySource : AcceptAll {
  std::optional<ca::Rejection> prescreen(const ca::Task&, const std::map<std::string, std::string>& files) {
    return ca::Rejection{ca::RejectionReason::forbidden_construct, std::to_string(files.size()) + " files", {}};
  }
};
struct FixedLibraries : AcceptAll {
  ca::LibraryPolicy library_policy(const ca::Task&) { return ca::LibraryPolicy{}.for_task(false, false); }
};
struct PrescreenReturningBool : AcceptAll {
  bool prescreen(const ca::Task&, const std::map<std::string, std::string>&) { return true; }
};
static_assert(ca::PrescreeningVerifier<RejectsEverySource>);
static_assert(!ca::PrescreeningVerifier<AcceptAll>);
static_assert(!ca::PrescreeningVerifier<PrescreenReturningBool>);
static_assert(ca::LibraryPolicyVerifier<FixedLibraries>);
static_assert(!ca::LibraryPolicyVerifier<RejectsEverySource>);
// SharedVerifier models exactly what the shared verifier models.
static_assert(ca::PrescreeningVerifier<ca::SharedVerifier<RejectsEverySource>>);
static_assert(!ca::LibraryPolicyVerifier<ca::SharedVerifier<RejectsEverySource>>);
static_assert(!ca::PrescreeningVerifier<ca::SharedVerifier<FixedLibraries>>);
static_assert(ca::LibraryPolicyVerifier<ca::SharedVerifier<FixedLibraries>>);
static_assert(!ca::PrescreeningVerifier<ca::SharedVerifier<AcceptAll>>);

}  // namespace

TEST_CASE("AnyVerifier and SharedVerifier forward the pre-screen of the verifier they hold", "[concepts]") {
  const ca::Task task;
  const std::map<std::string, std::string> files = {{"model_new.py", ""}, {"kernels/a.cpp", ""}};
  ca::AnyVerifier screening = RejectsEverySource{};
  const auto rejected = screening.prescreen(task, files);
  REQUIRE(rejected);
  CHECK(rejected->reason == ca::RejectionReason::forbidden_construct);
  CHECK(rejected->message == "2 files");
  // A verifier without static checks gives no reason before the build.
  ca::AnyVerifier plain = AcceptAll{};
  CHECK_FALSE(plain.prescreen(task, files));
  CHECK(plain.verify(task, ca::Candidate{}).correct);

  ca::SharedVerifier<RejectsEverySource> shared(std::make_shared<RejectsEverySource>());
  REQUIRE(shared.prescreen(task, files));
  CHECK(shared.prescreen(task, files)->message == "2 files");
  ca::SharedVerifier<FixedLibraries> libraries(std::make_shared<FixedLibraries>());
  CHECK_FALSE(libraries.library_policy(task).cublas);
  CHECK_THROWS_AS(ca::SharedVerifier<AcceptAll>(nullptr), std::invalid_argument);
}

TEST_CASE("AnyLlmClient forwards resume_after to a resumable client and ignores it otherwise", "[concepts]") {
  ca::AnyLlmClient resumable = ResumableEcho{};
  resumable.resume_after(3);
  REQUIRE(resumable.target<ResumableEcho>() != nullptr);
  CHECK(resumable.target<ResumableEcho>()->skipped == 3);
  ca::AnyLlmClient live = EchoClient{};
  live.resume_after(3);  // nothing to skip
  CHECK(live.name() == "echo");
}

TEST_CASE("AnyEvaluator forwards to the evaluator it holds", "[concepts]") {
  int calls = 0;
  ca::AnyEvaluator evaluator = CountingEvaluator{&calls};
  ca::Task task;
  task.name = "relu";
  CHECK(evaluator.evaluate(task, "/ws").compile.log == "relu in /ws");
  CHECK(calls == 1);
}

TEST_CASE("AnyLlmClient forwards to the client it holds", "[concepts]") {
  int calls = 0;
  ca::AnyLlmClient client = EchoClient{&calls};
  CHECK(client.name() == "echo");
  ca::ChatRequest request;
  request.messages.push_back(ca::Message::user("hi"));
  const auto response = client.complete(request);
  CHECK(response.message.content == "echo: hi");
  CHECK(response.usage.prompt_tokens == 3);
  CHECK(calls == 1);
  REQUIRE(client.target<EchoClient>() != nullptr);
  CHECK(client.target<ClientWithoutName>() == nullptr);

  ca::AnyLlmClient moved = std::move(client);
  (void)moved.complete(request);
  CHECK(calls == 2);
}

TEST_CASE("AnySandbox forwards to the sandbox it holds", "[concepts]") {
  std::vector<std::string> seen;
  ca::AnySandbox sandbox = RecordingSandbox{&seen};
  ca::Command command;
  command.argv = {"nvcc", "--version"};
  const auto result = sandbox.run(command);
  CHECK(result.sandbox == "recording");
  CHECK(seen == std::vector<std::string>{"nvcc"});
  CHECK(sandbox.target<RecordingSandbox>() != nullptr);
}

TEST_CASE("AnyVerifier, AnyProfiler and AnyRewardPolicy forward", "[concepts]") {
  ca::AnyVerifier verifier = AcceptAll{};
  ca::AnyProfiler profiler = FixedProfiler{};
  ca::AnyRewardPolicy policy = CorrectOnly{};
  const ca::Task task;
  const ca::Candidate candidate;

  ca::Evaluation evaluation;
  evaluation.compile.succeeded = true;
  evaluation.verification = verifier.verify(task, candidate);
  evaluation.profile = profiler.profile(task, candidate);
  CHECK(evaluation.verification->checks_passed == 5);
  REQUIRE(evaluation.profile->timing("candidate") != nullptr);
  CHECK(evaluation.profile->timing("candidate")->median_us == 100.0);
  CHECK(evaluation.profile->timing("eager") == nullptr);
  CHECK(policy.name() == "correct-only");
  CHECK(policy.reward(evaluation).value == 1);

  evaluation.compile.succeeded = false;
  CHECK(policy.reward(evaluation).label == "incorrect");
}

TEST_CASE("the tool registry offers specs and dispatches by name", "[concepts][tools]") {
  ca::ToolRegistry registry;
  registry.add(UpperTool{}).add(ThrowingTool{});
  CHECK(registry.size() == 2);
  CHECK(registry.contains("upper"));

  const auto specs = registry.specs();
  REQUIRE(specs.size() == 2);
  CHECK(specs[0].name == "upper");
  CHECK(specs[0].parameters["required"][0] == "text");

  ca::ToolContext context("/tmp");
  const auto ok = registry.invoke(ca::ToolCall::from_raw("1", "upper", R"({"text":"abc"})"), context);
  CHECK_FALSE(ok.is_error);
  CHECK(ok.content == "ABC");

  const auto missing_argument = registry.invoke(ca::ToolCall::from_raw("2", "upper", "{}"), context);
  CHECK(missing_argument.is_error);

  const auto unknown = registry.invoke(ca::ToolCall::from_raw("3", "lower", "{}"), context);
  CHECK(unknown.is_error);
  CHECK(unknown.content == "Error: no tool named 'lower'. Available tools: upper, broken.");

  const auto malformed = registry.invoke(ca::ToolCall::from_raw("4", "upper", R"({"text": )"), context);
  CHECK(malformed.is_error);
  CHECK(malformed.content.find("could not be used: tool arguments are not valid JSON") != std::string::npos);

  const auto thrown = registry.invoke(ca::ToolCall::from_raw("5", "broken", "{}"), context);
  CHECK(thrown.is_error);
  CHECK(thrown.content == "Error: broken failed: internal fault");
  CHECK(thrown.metadata["exception"] == true);

  // Adding a tool with a name already present replaces it.
  registry.add(ThrowingTool{});
  CHECK(registry.size() == 2);
}

TEST_CASE("the tool context tracks reads and the shell's directory", "[concepts][tools]") {
  ca::ToolContext context("/work/space", {"model.py"});
  CHECK(context.workspace() == "/work/space");
  CHECK(context.working_directory() == "/work/space");
  CHECK(context.protected_paths().size() == 1);
  CHECK(context.read_time("/work/space/a.cu") == nullptr);
  const auto now = std::filesystem::file_time_type::clock::now();
  context.record_read("/work/space/a.cu", now);
  REQUIRE(context.read_time("/work/space/a.cu") != nullptr);
  CHECK(*context.read_time("/work/space/a.cu") == now);
  context.set_working_directory("/work/space/kernels");
  CHECK(context.working_directory() == "/work/space/kernels");
}
