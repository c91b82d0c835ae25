// SPDX-License-Identifier: Apache-2.0
// Trajectories replay: an episode recorded by the loop plays back through the replay
// client (and through AnyLlmClient, as the command-line program holds it) to the same
// trusted results, without structural divergence, and a replayed episode killed midway
// resumes from its own trajectory.
#include "catch.hpp"

#include "agent_test_support.hpp"

#include <cuda_agent/llm/replay_client.hpp>
#include <cuda_agent/llm/scripted_client.hpp>

#include <csignal>

#include <sys/wait.h>

using namespace agent_test;

namespace {

std::vector<ca::ChatResponse> recorded_script() {
  return {
      answer({call("1", "Bash", {{"command", "ls"}})}, "Look around."),
      answer({call("2", "Write", {{"file_path", "kernels/k.cpp"}, {"content", "#error typo\n"}}),
              call("3", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.4, 1.1)}}),
              call("4", "Verify", nlohmann::json::object())}),
      answer({call("5", "Write", {{"file_path", "kernels/k.cpp"}, {"content", "// fixed\n"}}),
              call("6", "Verify", nlohmann::json::object())}),
      answer({call("7", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 2.1, 1.6)}}),
              call("8", "Verify", nlohmann::json::object())}),
      answer({call("9", "Finish", nlohmann::json::object())}),
  };
}

ca::EpisodeResult record(const fs::path& root) {
  TestLoop loop(ScriptClient(recorded_script()), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                MilestonePolicy{}, options_for(root));
  return loop.run(relu_task(), make_workspace(root, relu_task()));
}

}  // namespace

TEST_CASE("a recorded trajectory replays to the same trusted results", "[agent][replay]") {
  const auto recorded = record(fresh_directory("replay-recorded"));
  REQUIRE(recorded.best);
  REQUIRE(recorded.evaluations.size() == 2);

  const auto root = fresh_directory("replay-played");
  ca::AgentLoop loop(ca::ReplayClient(recorded.trajectory), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                     MilestonePolicy{}, options_for(root));
  const auto replayed = loop.run(relu_task(), make_workspace(root, relu_task()));

  CHECK(replayed.reason == ca::StopReason::completed);
  CHECK(replayed.turns == recorded.turns);
  REQUIRE(replayed.evaluations.size() == recorded.evaluations.size());
  for (std::size_t i = 0; i < replayed.evaluations.size(); ++i) {
    CHECK(replayed.evaluations[i].hash == recorded.evaluations[i].hash);
    CHECK(replayed.evaluations[i].reward.value == recorded.evaluations[i].reward.value);
  }
  CHECK(replayed.best->hash == recorded.best->hash);
  CHECK(loop.client().structural_count() == 0);
  CHECK(loop.client().turns_answered() == loop.client().turn_count());
  // Only the task prompt differs: it names the workspace, which is another directory.
  for (const auto& divergence : loop.client().divergences()) CHECK(divergence.turn == 0);
}

TEST_CASE("a replayed episode killed midway resumes through AnyLlmClient", "[agent][replay][resume]") {
  const auto recorded = record(fresh_directory("replay-source"));
  const auto root = fresh_directory("replay-killed");
  const auto workspace = make_workspace(root, relu_task());
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ca::AgentLoop loop(ca::AnyLlmClient(ca::ReplayClient(recorded.trajectory)), standard_tools(), DirectSandbox{},
                       VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
    ca::CallbackObserver killer;
    killer.tool_call = [](int, const ca::ToolCall& call, const ca::ToolResult&, double) {
      if (call.id == "7") std::raise(SIGKILL);
    };
    loop.add_observer(killer);
    (void)loop.run(relu_task(), workspace);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));

  ca::AnyLlmClient client(ca::ReplayClient(recorded.trajectory));
  ca::AgentLoop loop(std::move(client), standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{},
                     options_for(root));
  const auto resumed = loop.resume(relu_task(), workspace);
  CHECK(resumed.reason == ca::StopReason::completed);
  CHECK(resumed.turns == recorded.turns);
  REQUIRE(resumed.best);
  CHECK(resumed.best->hash == recorded.best->hash);
  const auto* replay = loop.client().target<ca::ReplayClient>();
  REQUIRE(replay != nullptr);
  CHECK(replay->structural_count() == 0);
  CHECK(replay->turns_answered() == replay->turn_count());
}

TEST_CASE("the scripted client skips the answers a resumed episode already has", "[agent][replay]") {
  std::vector<ca::ScriptedStep> steps;
  steps.push_back(answer({}, "one"));
  steps.push_back(ca::ScriptedError{ca::LlmErrorKind::retriable, "HTTP 503", 503});
  steps.push_back(answer({}, "two"));
  steps.push_back(answer({}, "three"));
  ca::ScriptedClient client(std::move(steps));
  client.resume_after(2);
  CHECK(client.complete({}).message.content == "three");
}
