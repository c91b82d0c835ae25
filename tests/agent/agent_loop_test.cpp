// SPDX-License-Identifier: Apache-2.0
// Complete episodes driven by a scripted model against conforming test components:
// success, the best (not the last) answer, compile errors and failed verifications,
// tool errors, budgets, compaction and overflow, stuck models, cancellation.
#include "catch.hpp"

#include "agent_test_support.hpp"

#include <sstream>
#include <thread>

using namespace agent_test;

TEST_CASE("an episode that writes, verifies and finishes keeps the trusted result", "[agent]") {
  const auto root = fresh_directory("success");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  const auto log = root / "calls.log";
  ScriptClient client({
      answer({call("c1", "Write", {{"file_path", "kernels/relu.cpp"}, {"content", "// relu kernel\n"}}),
              call("c2", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.8, 1.3)}})},
             "Writing a fused kernel."),
      answer({call("c3", "Verify", nlohmann::json::object())}),
      answer({call("c4", "Finish", {{"summary", "done"}})}),
  });
  TestLoop loop(client, standard_tools(log), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  int turn_starts = 0, turn_ends = 0, tool_calls = 0, evaluations = 0, finishes = 0;
  ca::CallbackObserver observer;
  observer.turn_start = [&](const ca::EpisodeProgress&) { ++turn_starts; };
  observer.turn_end = [&](const ca::EpisodeProgress&, const ca::ChatResponse&) { ++turn_ends; };
  observer.tool_call = [&](int, const ca::ToolCall&, const ca::ToolResult&, double) { ++tool_calls; };
  observer.evaluation = [&](const ca::ScoredCandidate&, bool) { ++evaluations; };
  observer.finish = [&](const ca::EpisodeResult&) { ++finishes; };
  loop.add_observer(observer);

  const ca::EpisodeResult result = loop.run(task, workspace);

  CHECK(result.reason == ca::StopReason::completed);
  CHECK(result.message == "the model called Finish");
  CHECK(result.turns == 3);
  CHECK(result.usage.prompt_tokens == 300);
  REQUIRE(result.best);
  CHECK(result.best->reward.value == 3);
  CHECK(result.best->turn == 2);
  CHECK(result.evaluations.size() == 1);  // verified once; the final evaluation saw the same files
  CHECK(*loop.evaluator().calls == 1);
  CHECK(read(result.best_directory / "model_new.py") == candidate(true, 1.8, 1.3));
  CHECK(read(result.best_directory / "kernels/relu.cpp") == "// relu kernel\n");
  CHECK(fs::exists(root / "out/report.md"));
  CHECK(read(root / "out/report.md").find("Reward **3**") != std::string::npos);
  CHECK(nlohmann::json::parse(read(root / "out/report.json"))["best"]["reward"]["value"] == 3);
  CHECK((turn_starts == 3 && turn_ends == 3 && tool_calls == 4 && evaluations == 1 && finishes == 1));

  // The model saw SKILL.md as the system prompt, then the task with the reference.
  const auto& first = loop.client().requests().front();
  REQUIRE(first.messages.size() == 2);
  CHECK(first.messages[0].role == ca::Role::system);
  CHECK(first.messages[0].content.find("# Skill") == 0);
  CHECK(first.messages[1].content.find("torch.relu") != std::string::npos);
  CHECK(first.tools.back().name == "Finish");
  // After verification, it was told the trusted result.
  const auto& third = loop.client().requests().at(2);
  CHECK(third.messages.back().role == ca::Role::user);
  CHECK(third.messages.back().content.find("reward 3 (faster_than_compile)") != std::string::npos);

  // The trajectory records the episode in order, every line a complete event.
  const auto events = ca::TrajectoryWriter::read_events(result.trajectory);
  CHECK(events.front()["type"] == "header");
  CHECK(events.front()["task"]["hash"] == task.content_hash());
  CHECK(events.front()["tools"].size() == 4);
  CHECK(events.back()["type"] == "finish");
  CHECK(events.back()["reason"] == "completed");
  CHECK(events.back()["best"]["reward"] == 3);
  CHECK(events_of_type(result.trajectory, "evaluation").size() == 1);
  CHECK(events_of_type(result.trajectory, "budget").size() >= 3);
  const auto messages = ca::conversation(events);
  CHECK(messages.size() == 2 + 3 + 4 + 1);  // system, task, 3 answers, 4 results, 1 evaluation note
  CHECK(read(log) == "Write kernels/relu.cpp\nWrite model_new.py\nVerify\n");
}

TEST_CASE("the episode's answer is the best candidate, not the last", "[agent]") {
  const auto root = fresh_directory("best-not-last");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  ScriptClient client({
      answer({call("a", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 2.0, 1.5)}}),
              call("b", "Verify", nlohmann::json::object())}),
      answer({call("c", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.2, 0.9)}}),
              call("d", "Verify", nlohmann::json::object())}),
      answer({call("e", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.3, 0.8)}})}),
  });
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, workspace);

  CHECK(result.reason == ca::StopReason::completed);
  CHECK(result.message == "the model answered without calling a tool");
  // Two verified changes, and the unverified last edit scored at the end.
  REQUIRE(result.evaluations.size() == 3);
  CHECK(result.evaluations[0].reward.value == 3);
  CHECK(result.evaluations[1].reward.value == 2);
  CHECK(result.evaluations[2].reward.value == 2);
  REQUIRE(result.best);
  CHECK(result.best->turn == 1);
  CHECK(read(result.best_directory / "model_new.py") == candidate(true, 2.0, 1.5));
  // The workspace still holds the last edit; only best/ holds the answer.
  CHECK(read(workspace / "model_new.py") == candidate(true, 1.3, 0.8));
  const auto note = loop.client().requests().at(2).messages.back().content;
  CHECK(note.find("The best so far remains turn 1") != std::string::npos);
}

TEST_CASE("equal rewards are ranked by speedup", "[agent]") {
  const auto root = fresh_directory("rank-by-speedup");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  ScriptClient client({
      answer({call("a", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.5, 1.2)}}),
              call("b", "Verify", nlohmann::json::object())}),
      answer({call("c", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.9, 1.6)}}),
              call("d", "Verify", nlohmann::json::object())}),
  });
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, workspace);
  REQUIRE(result.best);
  CHECK(result.best->reward.value == 3);
  CHECK(result.best->turn == 2);
  CHECK(result.best->ranking_speedup() == Approx(1.6));
}

TEST_CASE("compile errors and failed verifications are the model's to fix", "[agent]") {
  const auto root = fresh_directory("compile-and-verify-failures");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  ScriptClient client({
      answer({call("1", "Write", {{"file_path", "kernels/k.cpp"}, {"content", "#error missing semicolon\n"}}),
              call("2", "Write", {{"file_path", "model_new.py"}, {"content", candidate(false, 1.0, 1.0)}}),
              call("3", "Verify", nlohmann::json::object())}),
      answer({call("4", "Write", {{"file_path", "kernels/k.cpp"}, {"content", "// fixed\n"}}),
              call("5", "Verify", nlohmann::json::object())}),
      answer({call("6", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.02, 0.7)}}),
              call("7", "Verify", nlohmann::json::object())}),
      answer({call("8", "Finish", nlohmann::json::object())}),
  });
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, workspace);

  const auto& requests = loop.client().requests();
  CHECK(requests.at(1).messages.back().is_error);
  CHECK(requests.at(1).messages.back().content.find("compile error") != std::string::npos);
  CHECK(requests.at(2).messages.back().content.find("incorrect") != std::string::npos);
  // Failed verifications do not trigger trusted scoring; the passing one does.
  REQUIRE(result.evaluations.size() == 1);
  CHECK(result.evaluations[0].turn == 3);
  CHECK(result.best->reward.value == 1);
  CHECK(result.best->reward.label == "correct");
}

TEST_CASE("a candidate that never verified is still scored at the end", "[agent]") {
  const auto root = fresh_directory("final-evaluation");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  ScriptClient client(
      {answer({call("1", "Write", {{"file_path", "model_new.py"}, {"content", candidate(false, 1, 1)}})})});
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, workspace);
  REQUIRE(result.evaluations.size() == 1);
  CHECK(result.best->reward.value == -1);
  CHECK(result.best->evaluation.rejection()->reason == ca::RejectionReason::value_mismatch);
  CHECK(read(root / "out/report.md").find("value_mismatch") != std::string::npos);
}

TEST_CASE("tool errors go back to the model and never end the episode", "[agent]") {
  const auto root = fresh_directory("tool-errors");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  auto tools = standard_tools();
  tools.add(ThrowingTool{});
  ScriptClient client({
      answer({call("u", "Teleport", nlohmann::json::object()),
              ca::ToolCall::from_raw("m", "Write", "{\"file_path\": \"model_new.py\", "),  // cut short
              call("x", "Explode", nlohmann::json::object()), call("b", "Bash", {{"command", "exit 3"}}),
              call("w", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.0, 0.5)}})}),
      answer({call("f", "Finish", nlohmann::json::object())}),
  });
  TestLoop loop(client, std::move(tools), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, workspace);

  CHECK(result.reason == ca::StopReason::completed);
  const auto& messages = loop.client().requests().at(1).messages;
  REQUIRE(messages.size() == 2 + 1 + 5);
  // Every call answered, in the order the model gave them.
  const std::vector<std::string> ids{"u", "m", "x", "b", "w"};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CHECK(messages[3 + i].role == ca::Role::tool);
    CHECK(messages[3 + i].tool_call_id == ids[i]);
  }
  CHECK(messages[3].content.find("no tool named 'Teleport'") != std::string::npos);
  CHECK(messages[4].content.find("could not be used") != std::string::npos);
  CHECK(messages[5].content.find("internal failure") != std::string::npos);
  CHECK(messages[6].content.find("exit code 3") != std::string::npos);
  for (std::size_t i = 3; i < 7; ++i) CHECK(messages[i].is_error);
  CHECK_FALSE(messages[7].is_error);
  CHECK(result.best->reward.value == 1);
}

TEST_CASE("budgets end the episode with the reason stated", "[agent]") {
  const auto task = relu_task();
  auto endless = [] {
    std::vector<ScriptClient::Step> steps;
    for (int i = 0; i < 50; ++i)
      steps.push_back([i](const ca::ChatRequest&) {
        auto response = answer({call("b" + std::to_string(i), "Bash", {{"command", "echo " + std::to_string(i)}})});
        response.usage.cost_usd = 0.25;
        return response;
      });
    return ScriptClient(std::move(steps));
  };

  SECTION("turns") {
    const auto root = fresh_directory("budget-turns");
    auto options = options_for(root);
    options.budget.max_turns = 3;
    TestLoop loop(endless(), standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options);
    const auto result = loop.run(task, make_workspace(root, task));
    CHECK(result.reason == ca::StopReason::turn_limit);
    CHECK(result.turns == 3);
    CHECK(result.message == "the budget of 3 turns is spent");
    CHECK(loop.client().requests().size() == 3);
  }
  SECTION("money") {
    const auto root = fresh_directory("budget-money");
    auto options = options_for(root);
    options.budget.max_cost_usd = 1.0;
    TestLoop loop(endless(), standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options);
    const auto result = loop.run(task, make_workspace(root, task));
    CHECK(result.reason == ca::StopReason::cost_limit);
    CHECK(result.turns == 4);
    CHECK(*result.usage.cost_usd == Approx(1.0));
  }
  SECTION("money from token prices") {
    const auto root = fresh_directory("budget-prices");
    auto options = options_for(root);
    options.budget.max_cost_usd = 0.0009;
    options.budget.usd_per_million_prompt_tokens = 5.0;  // 100 prompt tokens a turn: $0.0005
    std::vector<ScriptClient::Step> steps;
    for (int i = 0; i < 10; ++i)
      steps.push_back([i](const ca::ChatRequest&) {
        return answer({call(std::to_string(i), "Bash", {{"command", "true"}})});
      });
    TestLoop loop(ScriptClient(std::move(steps)), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                  MilestonePolicy{}, options);
    const auto result = loop.run(task, make_workspace(root, task));
    CHECK(result.reason == ca::StopReason::cost_limit);
    CHECK(result.turns == 2);
  }
  SECTION("tokens") {
    const auto root = fresh_directory("budget-tokens");
    auto options = options_for(root);
    options.budget.max_total_tokens = 250;
    TestLoop loop(endless(), standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options);
    const auto result = loop.run(task, make_workspace(root, task));
    CHECK(result.reason == ca::StopReason::token_limit);
    CHECK(result.turns == 3);
  }
  SECTION("wall time") {
    const auto root = fresh_directory("budget-time");
    auto options = options_for(root);
    options.budget.wall_time = std::chrono::seconds(1);
    std::vector<ScriptClient::Step> steps;
    for (int i = 0; i < 50; ++i)
      steps.push_back([i](const ca::ChatRequest&) {
        return answer({call(std::to_string(i), "Bash", {{"command", "sleep 0.3"}})});
      });
    TestLoop loop(ScriptClient(std::move(steps)), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                  MilestonePolicy{}, options);
    const auto result = loop.run(task, make_workspace(root, task));
    CHECK(result.reason == ca::StopReason::time_limit);
    CHECK(result.turns >= 3);
    CHECK(result.turns <= 5);
  }
}

TEST_CASE("backend failures stop the episode with a clear reason and a complete trajectory", "[agent]") {
  const auto root = fresh_directory("llm-error");
  const auto task = relu_task();
  ScriptClient client(std::vector<ScriptClient::Step>{[](const ca::ChatRequest&) {
                                                        return answer({call("1", "Bash", {{"command", "true"}})});
                                                      },
                                                      [](const ca::ChatRequest&) -> ca::ChatResponse {
                                                        throw ca::LlmError(ca::LlmErrorKind::fatal, "invalid API key",
                                                                           401, 1);
                                                      }});
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::llm_error);
  CHECK(result.message.find("HTTP 401") != std::string::npos);
  CHECK(result.message.find("invalid API key") != std::string::npos);
  CHECK(events_of_type(result.trajectory, "finish").at(0)["reason"] == "llm_error");
}

TEST_CASE("an answer cut off by the output limit is continued", "[agent]") {
  const auto root = fresh_directory("length");
  const auto task = relu_task();
  auto cut = answer({}, "I will now write a very long");
  cut.finish_reason = ca::FinishReason::length;
  ScriptClient client({cut, answer({call("f", "Finish", nlohmann::json::object())})});
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::completed);
  CHECK(result.turns == 2);
  CHECK(loop.client().requests().at(1).messages.back().content.find("cut off") != std::string::npos);
}

TEST_CASE("a model repeating the same failing call is warned, then stopped", "[agent]") {
  const auto root = fresh_directory("stuck");
  const auto task = relu_task();
  std::vector<ca::ChatResponse> answers;
  for (int i = 0; i < 10; ++i) answers.push_back(answer({call(std::to_string(i), "Bash", {{"command", "false"}})}));
  auto options = options_for(root);
  options.stuck_repeat_limit = 3;
  TestLoop loop(ScriptClient(answers), standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{},
                options);
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::stuck);
  CHECK(result.turns == 3);
  CHECK(result.message.find("Bash {\"command\":\"false\"}") != std::string::npos);
  const auto& warned = loop.client().requests().at(2).messages.back();
  CHECK(warned.content.find("failed 2 times in a row") != std::string::npos);
}

TEST_CASE("a different failing call or a success resets the stuck count", "[agent]") {
  const auto root = fresh_directory("not-stuck");
  const auto task = relu_task();
  std::vector<ca::ChatResponse> answers;
  for (int i = 0; i < 6; ++i)
    answers.push_back(answer({call(std::to_string(i), "Bash", {{"command", i % 2 == 0 ? "false" : "exit 2"}})}));
  auto options = options_for(root);
  options.stuck_repeat_limit = 3;
  TestLoop loop(ScriptClient(answers), standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{},
                options);
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::completed);
  CHECK(result.turns == 7);
}

TEST_CASE("cancellation from another thread stops the episode promptly", "[agent]") {
  const auto root = fresh_directory("cancel");
  const auto task = relu_task();
  auto tools = standard_tools();
  WaitTool wait;
  tools.add(wait);
  ScriptClient client({
      answer({call("w", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 2, 2)}}),
              call("x", "Wait", nlohmann::json::object()), call("y", "Bash", {{"command", "echo never"}})}),
      answer({call("f", "Finish", nlohmann::json::object())}),
  });
  TestLoop loop(client, std::move(tools), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  std::stop_source stop;
  std::thread canceller([&] {
    while (!*wait.started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop.request_stop();
  });
  const auto started = std::chrono::steady_clock::now();
  const auto result = loop.run(task, make_workspace(root, task), stop.get_token());
  canceller.join();

  CHECK(result.reason == ca::StopReason::cancelled);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  CHECK(result.turns == 1);
  CHECK(result.evaluations.empty());  // no new trusted evaluation after a cancel
  // The call after the interrupted one is answered, not run, so the history stays valid.
  const auto messages = ca::conversation(ca::TrajectoryWriter::read_events(result.trajectory));
  CHECK(messages.back().tool_call_id == "y");
  CHECK(messages.back().content == "Not run: the episode was cancelled.");
}

TEST_CASE("the output directory of a finished episode is not overwritten", "[agent]") {
  const auto root = fresh_directory("no-overwrite");
  const auto task = relu_task();
  const auto workspace = make_workspace(root, task);
  TestLoop loop(ScriptClient(std::vector<ca::ChatResponse>{}), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                MilestonePolicy{}, options_for(root));
  (void)loop.run(task, workspace);
  CHECK_THROWS_WITH(loop.run(task, workspace), Catch::Matchers::Contains("already holds a trajectory"));
  CHECK_THROWS_WITH(loop.run(task, root / "missing"), Catch::Matchers::Contains("is not a directory"));
  fs::remove(workspace / "SKILL.md");
  TestLoop other(ScriptClient(std::vector<ca::ChatResponse>{}), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                 MilestonePolicy{}, options_for(root / "other"));
  CHECK_THROWS_WITH(other.run(task, workspace), Catch::Matchers::Contains("has no SKILL.md"));
}

TEST_CASE("progress shows plain lines when not on a terminal", "[agent]") {
  const auto root = fresh_directory("progress");
  const auto task = relu_task();
  ScriptClient client({
      answer({call("a", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.84, 1.21)}}),
              call("b", "Verify", nlohmann::json::object())}),
      answer({call("c", "Finish", nlohmann::json::object())}),
  });
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  std::ostringstream out;
  ca::TerminalProgress progress(out);
  CHECK_FALSE(progress.interactive());
  loop.add_observer(progress);
  (void)loop.run(task, make_workspace(root, task));
  const std::string text = out.str();
  INFO(text);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find("turn 1/200 | best reward 3 (1.84x eager, 1.21x compile) | ") != std::string::npos);
  CHECK(text.find("| Write, Verify") != std::string::npos);
  CHECK(text.find("turn 1: trusted evaluation: reward 3 (faster_than_compile), new best") != std::string::npos);
  CHECK(text.find("turn 2/200 | best reward 3 (1.84x eager, 1.21x compile)") != std::string::npos);
  CHECK(text.find("finished (completed) after 2 turns") != std::string::npos);

  std::ostringstream tty;
  ca::TerminalProgress redrawn(tty, true);
  redrawn.on_turn_start({});
  CHECK(tty.str().find("\r\x1b[2K") == 0);
}

TEST_CASE("a Bash command that runs the verification triggers trusted scoring", "[agent]") {
  const auto root = fresh_directory("bash-verification");
  const auto task = relu_task();
  ScriptClient client({
      answer({call("a", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.6, 1.2)}}),
              call("b", "Bash", {{"command", "echo verify passed"}})}),
      answer({call("c", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.1, 0.9)}}),
              call("d", "Bash", {{"command", "echo not a check"}})}),
      answer({call("e", "Bash", {{"command", "verify_that_fails_on_purpose"}})}),
  });
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options_for(root));
  const auto result = loop.run(task, make_workspace(root, task));
  // Turn 1 verified by Bash; turn 2 ran no verification; turn 3's failed; the end scores turn 2's files.
  REQUIRE(result.evaluations.size() == 2);
  CHECK(result.evaluations[0].turn == 1);
  CHECK(result.evaluations[1].turn == 4);
  CHECK(result.best->turn == 1);
}

TEST_CASE("a failing evaluator is reported, not blamed on the candidate", "[agent]") {
  struct BrokenEvaluator {
    ca::Evaluation evaluate(const ca::Task&, const fs::path&) { throw std::runtime_error("harness not installed"); }
  };
  const auto root = fresh_directory("broken-evaluator");
  const auto task = relu_task();
  ScriptClient client({answer({call("a", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 2, 2)}}),
                               call("b", "Verify", nlohmann::json::object())})});
  ca::AgentLoop loop(client, standard_tools(), DirectSandbox{}, BrokenEvaluator{}, MilestonePolicy{},
                     options_for(root));
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::completed);
  CHECK_FALSE(result.best);
  CHECK(result.message.find("the trusted evaluation failed (not the candidate's fault): harness not installed") !=
        std::string::npos);
  CHECK(events_of_type(result.trajectory, "evaluation_error").size() == 1);
}
