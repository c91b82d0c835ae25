// SPDX-License-Identifier: Apache-2.0
// Embedding the agent loop in a host program with components of its own:
//   - an LlmClient (here a rule-based "model", where a real host would call its
//     inference server),
//   - a Tool the model can call (a lint check of the candidate),
//   - a RewardPolicy (reward = speedup over eager, 0 for anything incorrect),
//   - an Evaluator (here: the candidate must byte-compile with Python; a real host uses
//     the trusted evaluator),
//   - observers: a lambda-based one and the terminal progress display.
// Every component is a plain type checked against its concept; nothing inherits from
// the library except the observer.
#include <cuda_agent/agent/agent_loop.hpp>
#include <cuda_agent/process.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace ca = cuda_agent;
namespace fs = std::filesystem;

// --- the model -------------------------------------------------------------------------
// Decides from the conversation alone: write a candidate, lint it, fix what the lint
// reports, then finish. A real client sends `request.messages` and `request.tools` to a
// model and maps its answer back (see cuda_agent/http/ for OpenAI and Anthropic).
struct RuleBasedModel {
  std::string_view name() const { return "rule-based-example"; }

  ca::ChatResponse complete(const ca::ChatRequest& request) {
    const ca::Message& last = request.messages.back();
    ca::ChatResponse response;
    response.usage.prompt_tokens = 50;
    response.usage.completion_tokens = 10;
    auto call = [&](std::string id, std::string tool, nlohmann::json arguments, std::string text) {
      response.message = ca::Message::assistant(
          std::move(text), {ca::ToolCall::from_raw(std::move(id), std::move(tool), arguments.dump())});
      response.finish_reason = ca::FinishReason::tool_calls;
      return response;
    };
    if (last.role == ca::Role::user && last.content.starts_with("Task:"))
      return call("1", "WriteCandidate", {{"source", "import cuda_extension\nclass ModelNew:\n  pass\n"}},
                  "A first candidate, without a docstring.");
    if (last.role == ca::Role::tool && last.name == "WriteCandidate")
      return call("2", "Lint", nlohmann::json::object(), "Lint it.");
    if (last.role == ca::Role::tool && last.name == "Lint" && last.is_error)
      return call("3", "WriteCandidate",
                  {{"source", "\"\"\"Fused ReLU.\"\"\"\nimport cuda_extension\nclass ModelNew:\n  pass\n"}},
                  "Add the docstring the lint asked for.");
    if (last.role == ca::Role::tool && last.name == "WriteCandidate")
      return call("4", "Lint", nlohmann::json::object(), "Again.");
    return call("5", "Finish", {{"summary", "candidate written and linted"}}, "Done.");
  }
};
static_assert(ca::LlmClient<RuleBasedModel>);

// --- tools -------------------------------------------------------------------------------
struct WriteCandidateTool {
  std::string_view name() const { return "WriteCandidate"; }
  std::string_view description() const { return "Replaces model_new.py with `source`."; }
  nlohmann::json parameters() const {
    return {{"type", "object"}, {"properties", {{"source", {{"type", "string"}}}}}, {"required", {"source"}}};
  }
  ca::ToolResult invoke(const nlohmann::json& arguments, ca::ToolContext& context) {
    if (!arguments.contains("source")) return ca::ToolResult::error("source is required");
    std::ofstream(context.workspace() / "model_new.py") << arguments["source"].get<std::string>();
    return ca::ToolResult::success("model_new.py written");
  }
};

/// The custom tool: a house rule that every candidate starts with a docstring. Setting
/// "verified" in the metadata tells the loop the model has checked its candidate, which
/// triggers a trusted evaluation when the files changed.
struct LintTool {
  std::string_view name() const { return "Lint"; }
  std::string_view description() const { return "Checks model_new.py against the house rules."; }
  nlohmann::json parameters() const { return {{"type", "object"}, {"properties", nlohmann::json::object()}}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext& context) {
    std::ifstream file(context.workspace() / "model_new.py");
    std::string first_line;
    std::getline(file, first_line);
    if (!first_line.starts_with("\"\"\""))
      return ca::ToolResult::error("model_new.py:1: start the file with a docstring");
    return ca::ToolResult::success("lint clean", {{"verified", true}});
  }
};

// --- sandbox, evaluator, reward ----------------------------------------------------------
/// Runs commands without confinement. The tools above run none; a host that runs model
/// commands uses BubblewrapSandbox (make_default_sandbox) instead.
struct TrustedCommands {
  ca::CommandResult run(const ca::Command& command) {
    ca::ProcessSpec spec;
    spec.argv = command.argv;
    spec.environment = command.environment;
    spec.working_directory = command.working_directory;
    spec.timeout = command.timeout;
    ca::CommandResult result;
    static_cast<ca::ProcessResult&>(result) = ca::run_process(spec);
    result.sandbox = "unconfined (example)";
    return result;
  }
};
static_assert(ca::Sandbox<TrustedCommands>);

/// Builds nothing and times nothing: it checks that the candidate byte-compiles, and
/// reports a speedup read from a comment, to keep the example self-contained.
struct ByteCompileEvaluator {
  ca::Evaluation evaluate(const ca::Task&, const fs::path& candidate) {
    ca::ProcessSpec spec;
    spec.argv = {"python3", "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())",
                 (candidate / "model_new.py").string()};
    spec.environment = ca::Environment::from_current({"PATH"});
    spec.timeout = std::chrono::seconds(30);
    spec.merge_stderr = true;
    const ca::ProcessResult run = ca::run_process(spec);
    ca::Evaluation evaluation;
    evaluation.compile.succeeded = run.succeeded();
    evaluation.compile.log = run.standard_output.text;
    if (!run.succeeded()) return evaluation;
    evaluation.verification = ca::VerificationResult{true, std::nullopt, 1, 1, {}, {}};
    ca::ProfileResult profile;
    profile.versus_eager = ca::SpeedupEstimate{"eager", 1.25, 1.2, 1.3, 0.95, 0.05, ca::Verdict::faster};
    evaluation.profile = profile;
    return evaluation;
  }
};
static_assert(ca::Evaluator<ByteCompileEvaluator>);

/// The paper's ablation: the raw speedup over eager, nothing for a wrong candidate.
struct SpeedupOverEager {
  std::string_view name() const { return "speedup-over-eager"; }
  ca::Reward reward(const ca::Evaluation& evaluation) const {
    if (!evaluation.correct()) return {0, "incorrect", "no reward without a correct candidate"};
    const auto speedup = ca::speedup_over(evaluation, "eager");
    if (!speedup) return {1, "untimed", "correct, not timed"};
    return {speedup->speedup, "speedup", "median eager time over median candidate time"};
  }
};
static_assert(ca::RewardPolicy<SpeedupOverEager>);

int main() {
  const fs::path root = fs::temp_directory_path() / "cuda-agent-example-embed";
  fs::remove_all(root);
  const fs::path workspace = root / "workspace";
  fs::create_directories(workspace / "kernels");
  std::ofstream(workspace / "SKILL.md") << "# House rules\nEvery file starts with a docstring. Lint, then Finish.\n";

  ca::Task task;
  task.name = "example/relu";
  task.reference_source =
      "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n";
  std::ofstream(workspace / "model.py") << task.reference_source;

  ca::ToolRegistry tools;
  tools.add(WriteCandidateTool{});
  tools.add(LintTool{});

  ca::AgentOptions options;
  options.output_directory = root / "out";
  options.budget.max_turns = 10;

  ca::AgentLoop loop(RuleBasedModel{}, std::move(tools), TrustedCommands{}, ByteCompileEvaluator{}, SpeedupOverEager{},
                     options);

  ca::TerminalProgress progress(std::cout);
  ca::CallbackObserver log;
  log.tool_call = [](int turn, const ca::ToolCall& call, const ca::ToolResult& result, double milliseconds) {
    std::cout << "  turn " << turn << ": " << call.name << (result.is_error ? " failed: " : " ok: ") << result.content
              << " (" << milliseconds << " ms)\n";
  };
  loop.add_observer(progress);
  loop.add_observer(log);

  const ca::EpisodeResult result = loop.run(task, workspace);
  std::cout << "stopped: " << to_string(result.reason) << " (" << result.message << ")\n";
  if (!result.best) return 1;
  std::cout << "best reward " << result.best->reward.value << " from turn " << result.best->turn << ", files in "
            << result.best_directory << "\nreport: " << (root / "out/report.md") << "\n";
  // The first candidate failed the lint and was never verified; the second was.
  const bool as_expected = result.reason == ca::StopReason::completed && result.best->reward.value == 1.25 &&
                           result.evaluations.size() == 1 && result.turns == 5;
  return as_expected ? 0 : 1;
}
