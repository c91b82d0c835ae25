// SPDX-License-Identifier: Apache-2.0
// Crash and resume: an episode killed (SIGKILL, in a child process) at different points
// resumes from its trajectory without repeating finished tool calls and ends with the
// same result as an episode that was never interrupted.
#include "catch.hpp"

#include "agent_test_support.hpp"

#include <csignal>
#include <functional>

#include <sys/wait.h>

using namespace agent_test;

namespace {

/// The scripted episode every test here plays: explore, write a kernel, a parallel batch,
/// a failing verification, a fix, a verified candidate, a worse one, and Finish.
std::vector<ca::ChatResponse> episode_script() {
  return {
      answer({call("1", "Bash", {{"command", "cat model.py | head -3"}})}, "Look at the reference."),
      answer({call("2", "Write", {{"file_path", "kernels/relu.cpp"}, {"content", "// relu v1\n"}}),
              call("3", "Write", {{"file_path", "model_new.py"}, {"content", candidate(false, 1, 1)}}),
              call("4", "Verify", nlohmann::json::object())}),
      answer({call("5", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.7, 1.3)}}),
              call("6", "Verify", nlohmann::json::object())}),
      answer({call("7", "Write", {{"file_path", "kernels/relu.cpp"}, {"content", "// relu v2, slower\n"}}),
              call("8", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.2, 0.9)}}),
              call("9", "Verify", nlohmann::json::object())}),
      answer({call("10", "Finish", {{"summary", "kept the v1 kernel"}})}),
  };
}

struct Run {
  fs::path root;
  fs::path workspace;
  ca::AgentOptions options;
};

Run prepare(const std::string& name) {
  Run run;
  run.root = fresh_directory(name);
  run.workspace = make_workspace(run.root, relu_task());
  run.options = options_for(run.root);
  return run;
}

/// Kills the process at a chosen point.
struct Killer final : ca::AgentObserver {
  std::function<bool(int turn, const ca::ToolCall*)> after_tool_call;
  std::function<bool(int turn)> after_turn;
  void on_tool_call(int turn, const ca::ToolCall& call, const ca::ToolResult&, double) override {
    if (after_tool_call && after_tool_call(turn, &call)) std::raise(SIGKILL);
  }
  void on_turn_end(const ca::EpisodeProgress& progress, const ca::ChatResponse&) override {
    if (after_turn && after_turn(progress.turn)) std::raise(SIGKILL);
  }
};

/// Runs `body` in a child process and returns how it ended.
int in_child(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

ca::EpisodeResult uninterrupted(const Run& run) {
  TestLoop loop(ScriptClient(episode_script()), standard_tools(run.root / "calls.log"), DirectSandbox{},
                VerdictEvaluator{}, MilestonePolicy{}, run.options);
  return loop.run(relu_task(), run.workspace);
}

ca::EpisodeResult resumed(const Run& run, int* evaluator_calls = nullptr) {
  TestLoop loop(ScriptClient(episode_script()), standard_tools(run.root / "calls.log"), DirectSandbox{},
                VerdictEvaluator{}, MilestonePolicy{}, run.options);
  auto result = loop.resume(relu_task(), run.workspace);
  if (evaluator_calls) *evaluator_calls = *loop.evaluator().calls;
  return result;
}

void check_same_outcome(const ca::EpisodeResult& actual, const ca::EpisodeResult& expected, const Run& actual_run,
                        const Run& expected_run) {
  CHECK(actual.reason == expected.reason);
  CHECK(actual.turns == expected.turns);
  REQUIRE(actual.best);
  REQUIRE(expected.best);
  CHECK(actual.best->hash == expected.best->hash);
  CHECK(actual.best->reward.value == expected.best->reward.value);
  CHECK(actual.best->turn == expected.best->turn);
  REQUIRE(actual.evaluations.size() == expected.evaluations.size());
  for (std::size_t i = 0; i < actual.evaluations.size(); ++i) {
    CHECK(actual.evaluations[i].hash == expected.evaluations[i].hash);
    CHECK(actual.evaluations[i].turn == expected.evaluations[i].turn);
  }
  CHECK(read(actual.best_directory / "model_new.py") == read(expected.best_directory / "model_new.py"));
  CHECK(read(actual_run.workspace / "kernels/relu.cpp") == read(expected_run.workspace / "kernels/relu.cpp"));
  // Every tool call ran exactly once, as in the uninterrupted episode.
  CHECK(read(actual_run.root / "calls.log") == read(expected_run.root / "calls.log"));
  // The conversation recorded is the same one.
  const auto actual_messages = ca::conversation(ca::TrajectoryWriter::read_events(actual.trajectory));
  const auto expected_messages = ca::conversation(ca::TrajectoryWriter::read_events(expected.trajectory));
  REQUIRE(actual_messages.size() == expected_messages.size());
  for (std::size_t i = 0; i < actual_messages.size(); ++i) {
    const std::string actual_text = actual_messages[i].content;
    const std::string expected_text = expected_messages[i].content;
    // Paths differ between the two runs' workspaces; everything else must match.
    if (actual_text.find(actual_run.root.string()) == std::string::npos) CHECK(actual_text == expected_text);
    CHECK(actual_messages[i].tool_calls == expected_messages[i].tool_calls);
  }
}

}  // namespace

TEST_CASE("a killed episode resumes and ends as if it had never been interrupted", "[agent][resume]") {
  const Run reference = prepare("resume-reference");
  const auto expected = uninterrupted(reference);
  REQUIRE(expected.reason == ca::StopReason::completed);
  REQUIRE(expected.best->reward.value == 3);
  REQUIRE(expected.evaluations.size() == 2);

  struct KillPoint {
    std::string name;
    std::function<void(Killer&)> arm;
  };
  const std::vector<KillPoint> points{
      {"between two calls of one turn",
       [](Killer& killer) { killer.after_tool_call = [](int, const ca::ToolCall* c) { return c->id == "2"; }; }},
      {"after the last call of a turn, before scoring",
       [](Killer& killer) { killer.after_tool_call = [](int, const ca::ToolCall* c) { return c->id == "6"; }; }},
      {"after a closed turn", [](Killer& killer) { killer.after_turn = [](int turn) { return turn == 3; }; }},
      {"after Finish was answered",
       [](Killer& killer) { killer.after_tool_call = [](int, const ca::ToolCall* c) { return c->id == "10"; }; }},
  };
  for (const KillPoint& point : points) {
    DYNAMIC_SECTION("killed " << point.name) {
      const Run run = prepare("resume-" + std::to_string(std::hash<std::string>{}(point.name)));
      const int status = in_child([&] {
        TestLoop loop(ScriptClient(episode_script()), standard_tools(run.root / "calls.log"), DirectSandbox{},
                      VerdictEvaluator{}, MilestonePolicy{}, run.options);
        Killer killer;
        point.arm(killer);
        loop.add_observer(killer);
        (void)loop.run(relu_task(), run.workspace);
      });
      REQUIRE(WIFSIGNALED(status));
      REQUIRE(WTERMSIG(status) == SIGKILL);
      CHECK(events_of_type(run.options.output_directory / "trajectory.jsonl", "finish").empty());

      const auto result = resumed(run);
      CHECK(result.resumed);
      check_same_outcome(result, expected, run, reference);
    }
  }
}

TEST_CASE("a crash inside the model call or the trusted evaluation resumes too", "[agent][resume]") {
  const Run reference = prepare("resume-reference-2");
  const auto expected = uninterrupted(reference);

  SECTION("inside the model call of turn 4") {
    const Run run = prepare("resume-in-model");
    const int status = in_child([&] {
      std::vector<ScriptClient::Step> steps;
      for (const auto& each : episode_script()) steps.push_back([each](const ca::ChatRequest&) { return each; });
      steps[3] = [](const ca::ChatRequest&) -> ca::ChatResponse {
        std::raise(SIGKILL);
        return {};
      };
      TestLoop loop(ScriptClient(std::move(steps)), standard_tools(run.root / "calls.log"), DirectSandbox{},
                    VerdictEvaluator{}, MilestonePolicy{}, run.options);
      (void)loop.run(relu_task(), run.workspace);
    });
    REQUIRE(WIFSIGNALED(status));
    check_same_outcome(resumed(run), expected, run, reference);
  }

  SECTION("inside the trusted evaluation of turn 4") {
    const Run run = prepare("resume-in-evaluation");
    struct DyingEvaluator {
      VerdictEvaluator inner;
      int calls = 0;
      ca::Evaluation evaluate(const ca::Task& task, const fs::path& directory) {
        if (++calls == 2) std::raise(SIGKILL);
        return inner.evaluate(task, directory);
      }
    };
    const int status = in_child([&] {
      ca::AgentLoop loop(ScriptClient(episode_script()), standard_tools(run.root / "calls.log"), DirectSandbox{},
                         DyingEvaluator{}, MilestonePolicy{}, run.options);
      (void)loop.run(relu_task(), run.workspace);
    });
    REQUIRE(WIFSIGNALED(status));
    int evaluator_calls = 0;
    const auto result = resumed(run, &evaluator_calls);
    check_same_outcome(result, expected, run, reference);
    CHECK(evaluator_calls == 1);  // only the interrupted evaluation is run again
  }
}

TEST_CASE("a cancelled episode resumes; a finished one is only reported again", "[agent][resume]") {
  const Run reference = prepare("resume-reference-3");
  const auto expected = uninterrupted(reference);

  const Run run = prepare("resume-cancelled");
  {
    std::stop_source stop;
    TestLoop loop(ScriptClient(episode_script()), standard_tools(run.root / "calls.log"), DirectSandbox{},
                  VerdictEvaluator{}, MilestonePolicy{}, run.options);
    ca::CallbackObserver canceller;
    canceller.turn_end = [&](const ca::EpisodeProgress& progress, const ca::ChatResponse&) {
      if (progress.turn == 2) stop.request_stop();
    };
    loop.add_observer(canceller);
    const auto cancelled = loop.run(relu_task(), run.workspace, stop.get_token());
    REQUIRE(cancelled.reason == ca::StopReason::cancelled);
    CHECK(cancelled.turns == 2);
  }
  const auto result = resumed(run);
  check_same_outcome(result, expected, run, reference);

  const auto events_before = ca::TrajectoryWriter::read_events(result.trajectory).size();
  int evaluator_calls = -1;
  const auto again = resumed(run, &evaluator_calls);
  CHECK(again.reason == ca::StopReason::completed);
  CHECK(again.best->hash == result.best->hash);
  CHECK(evaluator_calls == 0);
  CHECK(ca::TrajectoryWriter::read_events(result.trajectory).size() == events_before);
}

TEST_CASE("resuming needs the trajectory of the same task", "[agent][resume]") {
  const Run run = prepare("resume-mismatch");
  TestLoop loop(ScriptClient(std::vector<ca::ChatResponse>{}), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                MilestonePolicy{}, run.options);
  CHECK_THROWS_WITH(loop.resume(relu_task(), run.workspace), Catch::Matchers::Contains("there is no trajectory"));
  (void)loop.run(relu_task(), run.workspace);
  auto other = relu_task();
  other.reference_source += "# changed\n";
  CHECK_THROWS_WITH(loop.resume(other, run.workspace), Catch::Matchers::Contains("whose reference differs"));
}
