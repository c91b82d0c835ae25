// SPDX-License-Identifier: Apache-2.0
#pragma once

// Small conforming components for driving complete episodes in tests: a client that plays
// a script of answers, tools that write files and "verify" them, a sandbox that runs
// commands directly, and an evaluator whose verdict is written into the candidate itself
// (so that a test decides what each candidate scores).

#include <cuda_agent/agent/agent_loop.hpp>
#include <cuda_agent/process.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace agent_test {

namespace ca = cuda_agent;
namespace fs = std::filesystem;

inline fs::path fresh_directory(const std::string& name) {
  const fs::path directory = fs::temp_directory_path() / ("cuda-agent-agent-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(directory);
  fs::create_directories(directory);
  return directory;
}

inline std::string read(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

inline void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

inline ca::Task relu_task() {
  ca::Task task;
  task.name = "test/relu";
  task.reference_source =
      "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
      "def get_inputs():\n    return [torch.randn(1024)]\n\ndef get_init_inputs():\n    return []\n";
  return task;
}

/// A workspace as the materializer leaves it: SKILL.md and model.py, nothing else.
inline fs::path make_workspace(const fs::path& root, const ca::Task& task) {
  const fs::path workspace = root / "workspace";
  write(workspace / "SKILL.md", "# Skill\nWrite kernels, verify them, then call Finish.\n");
  write(workspace / "model.py", task.reference_source);
  fs::create_directories(workspace / "kernels");
  return workspace;
}

// --- the model ----------------------------------------------------------------------------

inline ca::ToolCall call(std::string id, std::string name, nlohmann::json arguments) {
  return ca::ToolCall::from_raw(std::move(id), std::move(name), arguments.dump());
}

inline ca::ChatResponse answer(std::vector<ca::ToolCall> calls, std::string text = {}) {
  ca::ChatResponse response;
  response.finish_reason = calls.empty() ? ca::FinishReason::stop : ca::FinishReason::tool_calls;
  response.message = ca::Message::assistant(std::move(text), std::move(calls));
  response.usage.prompt_tokens = 100;
  response.usage.completion_tokens = 20;
  response.model = "scripted-test";
  return response;
}

/// Plays a fixed list of answers, one per request, and remembers every request. When the
/// script runs out it answers without tool calls (the model stops). An entry may instead
/// throw (to inject backend errors).
class ScriptClient {
 public:
  using Step = std::function<ca::ChatResponse(const ca::ChatRequest&)>;

  explicit ScriptClient(std::vector<ca::ChatResponse> answers) {
    for (auto& each : answers) steps_->push_back([each](const ca::ChatRequest&) { return each; });
  }
  explicit ScriptClient(std::vector<Step> steps) { *steps_ = std::move(steps); }

  std::string_view name() const { return "script"; }

  ca::ChatResponse complete(const ca::ChatRequest& request) {
    requests_->push_back(request);
    if (next_ >= steps_->size()) return answer({}, "done");
    ca::ChatResponse response = (*steps_)[next_](request);  // a step that throws is tried again
    ++next_;
    if (count_prompt_tokens) {  // as a real backend would: about four characters a token
      std::size_t characters = 0;
      for (const auto& message : request.messages) characters += ca::ContextWindow::characters_of(message);
      response.usage.prompt_tokens = static_cast<std::int64_t>(characters / 4);
    }
    return response;
  }

  void resume_after(int turns) { next_ = static_cast<std::size_t>(turns); }

  /// Report prompt tokens from the request's size instead of the scripted figure.
  bool count_prompt_tokens = false;

  [[nodiscard]] const std::vector<ca::ChatRequest>& requests() const { return *requests_; }

 private:
  std::shared_ptr<std::vector<Step>> steps_ = std::make_shared<std::vector<Step>>();
  std::shared_ptr<std::vector<ca::ChatRequest>> requests_ = std::make_shared<std::vector<ca::ChatRequest>>();
  std::size_t next_ = 0;
};

// --- tools ----------------------------------------------------------------------------------

/// Appends one line per invocation to a log, so tests can see which calls really ran.
inline void log_invocation(const fs::path& log, const std::string& line) {
  if (log.empty()) return;
  std::ofstream(log, std::ios::app) << line << '\n';
}

struct WriteTool {
  fs::path log;
  std::string_view name() const { return "Write"; }
  std::string_view description() const { return "Writes content to file_path in the workspace."; }
  nlohmann::json parameters() const {
    return {{"type", "object"},
            {"properties", {{"file_path", {{"type", "string"}}}, {"content", {{"type", "string"}}}}},
            {"required", {"file_path", "content"}}};
  }
  ca::ToolResult invoke(const nlohmann::json& arguments, ca::ToolContext& context) {
    const std::string path = arguments.value("file_path", "");
    if (path.empty()) return ca::ToolResult::error("Error: file_path is required");
    log_invocation(log, "Write " + path);
    write(context.workspace() / path, arguments.value("content", ""));
    return ca::ToolResult::success("Wrote " + path);
  }
};

/// The verdict a candidate carries: `model_new.py` says `correct` or `wrong`, and
/// `speedup=<eager>,<compile>`; a kernel containing `#error` does not compile.
struct Verdict {
  bool compiles = false;
  bool correct = false;
  double versus_eager = 0;
  double versus_compile = 0;
};

inline Verdict read_verdict(const fs::path& directory) {
  Verdict verdict;
  if (!fs::exists(directory / "model_new.py")) return verdict;
  verdict.compiles = true;
  for (const auto& file : ca::detail::candidate_files(directory))
    if (read(directory / file).find("#error") != std::string::npos) verdict.compiles = false;
  const std::string model = read(directory / "model_new.py");
  verdict.correct = model.find("correct") != std::string::npos;
  std::smatch match;
  if (std::regex_search(model, match, std::regex(R"(speedup=([0-9.]+),([0-9.]+))"))) {
    verdict.versus_eager = std::stod(match[1]);
    verdict.versus_compile = std::stod(match[2]);
  }
  return verdict;
}

/// The model's informational check: fails with a message a model could act on.
struct VerifyTool {
  fs::path log;
  std::string_view name() const { return "Verify"; }
  std::string_view description() const { return "Builds and checks the candidate."; }
  nlohmann::json parameters() const { return {{"type", "object"}, {"properties", nlohmann::json::object()}}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext& context) {
    log_invocation(log, "Verify");
    const Verdict verdict = read_verdict(context.workspace());
    if (!verdict.compiles) return ca::ToolResult::error("compile error: kernels/kernel.cpp:1: #error");
    if (!verdict.correct) return ca::ToolResult::error("incorrect: output 0 differs at index 3");
    return ca::ToolResult::success("correct: 5/5 checks passed");
  }
};

/// Runs `command` through the sandbox the loop lends to its tools.
struct ShellTool {
  fs::path log;
  std::string_view name() const { return "Bash"; }
  std::string_view description() const { return "Runs a shell command in the sandbox."; }
  nlohmann::json parameters() const {
    return {{"type", "object"}, {"properties", {{"command", {{"type", "string"}}}}}, {"required", {"command"}}};
  }
  ca::ToolResult invoke(const nlohmann::json& arguments, ca::ToolContext& context) {
    if (!context.sandbox()) return ca::ToolResult::error("Error: no sandbox");
    const std::string command = arguments.value("command", "");
    log_invocation(log, "Bash " + command);
    ca::Command run;
    run.argv = {"/bin/sh", "-c", command};
    run.working_directory = context.workspace();
    run.environment = ca::Environment::from_current({"PATH"});
    run.cancellation = context.cancellation();
    run.timeout = std::chrono::seconds(30);
    const ca::CommandResult result = context.sandbox()->run(run);
    std::string text = result.standard_output.text;
    if (text.empty()) text = "(no output)";
    if (!result.succeeded())
      return ca::ToolResult::error(text + "\n" + ca::describe_exit(result),
                                   {{"exit_code", result.exit_code.value_or(-1)}});
    return ca::ToolResult::success(text, {{"exit_code", 0}});
  }
};

struct ThrowingTool {
  std::string_view name() const { return "Explode"; }
  std::string_view description() const { return "Always throws."; }
  nlohmann::json parameters() const { return {{"type", "object"}, {"properties", nlohmann::json::object()}}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext&) { throw std::runtime_error("internal failure"); }
};

/// Blocks until the episode is cancelled (or 10 s pass).
struct WaitTool {
  std::shared_ptr<std::atomic<bool>> started = std::make_shared<std::atomic<bool>>(false);
  std::string_view name() const { return "Wait"; }
  std::string_view description() const { return "Waits."; }
  nlohmann::json parameters() const { return {{"type", "object"}, {"properties", nlohmann::json::object()}}; }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext& context) {
    *started = true;
    std::mutex mutex;
    std::condition_variable_any wake;
    std::unique_lock lock(mutex);
    std::stop_token token = context.cancellation();
    const bool cancelled =
        wake.wait_for(lock, token, std::chrono::seconds(10), [] { return false; }) || token.stop_requested();
    return cancelled ? ca::ToolResult::error("interrupted") : ca::ToolResult::success("waited");
  }
};

inline ca::ToolRegistry standard_tools(const fs::path& log = {}) {
  ca::ToolRegistry tools;
  tools.add(WriteTool{log});
  tools.add(VerifyTool{log});
  tools.add(ShellTool{log});
  return tools;
}

// --- sandbox, evaluator, reward ------------------------------------------------------------

/// Runs commands directly (unconfined): test commands are trusted.
struct DirectSandbox {
  ca::CommandResult run(const ca::Command& command) {
    ca::ProcessSpec spec;
    spec.argv = command.argv;
    spec.environment = command.environment;
    spec.working_directory = command.working_directory;
    spec.timeout = command.timeout;
    spec.merge_stderr = command.merge_stderr;
    spec.cancellation = command.cancellation;
    ca::CommandResult result;
    static_cast<ca::ProcessResult&>(result) = ca::run_process(spec);
    result.sandbox = "direct";
    return result;
  }
};

/// Scores by the verdict the candidate carries; counts its calls.
struct VerdictEvaluator {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  ca::Evaluation evaluate(const ca::Task&, const fs::path& directory) {
    ++*calls;
    const Verdict verdict = read_verdict(directory);
    ca::Evaluation evaluation;
    evaluation.compile.succeeded = verdict.compiles;
    if (!verdict.compiles) return evaluation;
    ca::VerificationResult verification;
    verification.correct = verdict.correct;
    verification.checks_total = 5;
    verification.checks_passed = verdict.correct ? 5 : 2;
    if (!verdict.correct)
      verification.rejection = ca::Rejection{ca::RejectionReason::value_mismatch, "output 0 differs at index 3", {}};
    evaluation.verification = verification;
    if (!verdict.correct) return evaluation;
    ca::ProfileResult profile;
    auto estimate = [](std::string baseline, double speedup) {
      ca::SpeedupEstimate result;
      result.baseline = std::move(baseline);
      result.speedup = speedup;
      result.interval_low = speedup * 0.98;
      result.interval_high = speedup * 1.02;
      result.verdict = result.interval_low > 1.05    ? ca::Verdict::faster
                       : result.interval_high < 0.95 ? ca::Verdict::slower
                                                     : ca::Verdict::same;
      return result;
    };
    profile.versus_eager = estimate("eager", verdict.versus_eager);
    profile.versus_compile = estimate("compile", verdict.versus_compile);
    evaluation.profile = profile;
    return evaluation;
  }
};

/// The paper's milestones, written out here so these tests do not depend on the
/// profiler's policies.
struct MilestonePolicy {
  std::string_view name() const { return "test-milestone"; }
  ca::Reward reward(const ca::Evaluation& evaluation) const {
    if (!evaluation.correct()) return {-1, "incorrect", "did not compile or verify"};
    const auto& profile = evaluation.profile;
    const bool eager = profile && profile->versus_eager && profile->versus_eager->verdict == ca::Verdict::faster;
    const bool compile = profile && profile->versus_compile && profile->versus_compile->verdict == ca::Verdict::faster;
    if (eager && compile) return {3, "faster_than_compile", "faster than eager and compile"};
    if (eager) return {2, "faster_than_eager", "faster than eager"};
    return {1, "correct", "correct"};
  }
};

inline std::string candidate(bool correct, double eager, double compile) {
  return std::string("import cuda_extension\n# ") + (correct ? "correct" : "wrong") +
         " speedup=" + std::to_string(eager) + "," + std::to_string(compile) + "\n";
}

inline ca::AgentOptions options_for(const fs::path& root) {
  ca::AgentOptions options;
  options.output_directory = root / "out";
  return options;
}

using TestLoop = ca::AgentLoop<ScriptClient, ca::ToolRegistry, DirectSandbox, VerdictEvaluator, MilestonePolicy>;

inline std::vector<nlohmann::json> events_of_type(const fs::path& trajectory, const std::string& type) {
  std::vector<nlohmann::json> result;
  for (auto& event : ca::TrajectoryWriter::read_events(trajectory))
    if (event.value("type", "") == type) result.push_back(std::move(event));
  return result;
}

}  // namespace agent_test
