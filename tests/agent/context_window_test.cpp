// SPDX-License-Identifier: Apache-2.0
// The context window: capped observations, elision of old outputs, summaries of old
// turns, what is never removed, replay of recorded operations, and the loop's use of it
// (proactive compaction, one compaction and retry on a backend overflow, a clear stop
// when nothing more can be removed).
#include "catch.hpp"

#include "agent_test_support.hpp"

#include <cuda_agent/agent/context_window.hpp>

using namespace agent_test;

namespace {

std::string lines(std::size_t count, const std::string& prefix) {
  std::string text;
  for (std::size_t i = 0; i < count; ++i) text += prefix + " line " + std::to_string(i) + "\n";
  return text;
}

/// A conversation of `turns` turns, each a Bash call answered with a large output.
ca::ContextWindow conversation(ca::ContextOptions options, int turns) {
  ca::ContextWindow window(std::move(options));
  window.append(ca::Message::system("SKILL"), ca::ContextRole::pinned);
  window.append(ca::Message::user("TASK"), ca::ContextRole::pinned);
  for (int i = 0; i < turns; ++i) {
    const std::string id = "c" + std::to_string(i);
    window.append(ca::Message::assistant("step " + std::to_string(i),
                                         {call(id, "Bash", {{"command", "make " + std::to_string(i)}})}));
    window.append(ca::Message::tool_result(id, "Bash", lines(50, "output " + std::to_string(i)), i % 3 == 0));
  }
  return window;
}

}  // namespace

TEST_CASE("observations keep head and tail and state what was elided", "[agent][context]") {
  const std::string text = lines(1000, "x");
  const std::string capped = ca::cap_observation(text, 1000);
  CHECK(capped.size() < 1200);
  CHECK(capped.substr(0, 10) == text.substr(0, 10));
  CHECK(capped.substr(capped.size() - 10) == text.substr(text.size() - 10));
  CHECK(capped.find("characters (") != std::string::npos);
  CHECK(capped.find("elided from the middle of this output") != std::string::npos);
  CHECK(ca::cap_observation("short", 1000) == "short");
  // Never cuts a multi-byte character in half.
  const std::string accents(3000, 'a');
  std::string utf8;
  for (int i = 0; i < 1000; ++i) utf8 += "\xc3\xa9";  // é
  const std::string cut = ca::cap_observation(utf8, 501);
  CHECK(cut.find("\xc3\xa9\n[...") != std::string::npos);
}

TEST_CASE("compaction elides old outputs first, newest and protected messages stay", "[agent][context]") {
  ca::ContextOptions options;
  options.window_tokens = 4'000;
  options.reserve_tokens = 1'000;
  options.keep_recent_observations = 2;
  auto window = conversation(options, 20);
  window.append(ca::Message::user("[best so far: reward 3]"), ca::ContextRole::best_result);
  REQUIRE(window.needs_compaction());
  const auto before = window.messages();

  const auto outcome = window.compact();
  REQUIRE(outcome.shrunk());
  CHECK(outcome.tokens_after <= window.usable_tokens());
  REQUIRE(outcome.operations.size() == 1);
  CHECK(outcome.operations[0]["kind"] == "elide");
  const auto after = window.messages();
  REQUIRE(after.size() == before.size());  // elision keeps every message, only shortened
  CHECK(after[0].content == "SKILL");
  CHECK(after[1].content == "TASK");
  CHECK(after[3].content.find("[Older output elided to save context: ") == 0);
  CHECK(after[3].content.find("51 lines") != std::string::npos);
  CHECK(after[3].tool_call_id == before[3].tool_call_id);
  CHECK(after[3].is_error == before[3].is_error);
  CHECK(after[after.size() - 2].content == before[before.size() - 2].content);  // newest output kept
  CHECK(after.back().content == "[best so far: reward 3]");
}

TEST_CASE("when elision is not enough, older turns are folded into a summary", "[agent][context]") {
  ca::ContextOptions options;
  options.window_tokens = 6'000;
  options.reserve_tokens = 500;
  options.keep_recent_turns = 3;
  options.keep_recent_observations = 3;
  auto window = conversation(options, 30);
  window.append(ca::Message::assistant(
      "checking", {call("z", "Write", {{"file_path", "k.cu"}, {"content", std::string(12'000, 'k')}})}));
  window.append(ca::Message::tool_result("z", "Write", "ok"));
  const auto outcome = window.compact();
  REQUIRE(outcome.shrunk());
  CHECK_FALSE(window.needs_compaction());
  bool summarized = false;
  for (const auto& operation : outcome.operations) summarized |= operation["kind"] == "summary";
  CHECK(summarized);
  const auto messages = window.messages();
  CHECK(messages[0].content == "SKILL");
  CHECK(messages[1].content == "TASK");
  REQUIRE(messages[2].role == ca::Role::user);
  CHECK(messages[2].content.find("<conversation_summary>") == 0);
  CHECK(messages[2].content.find("- Bash {\"command\":\"make 0\"} -> failed: [Older output elided") !=
        std::string::npos);
  CHECK(messages[2].content.find("- Bash {\"command\":\"make 1\"} -> ok: ") != std::string::npos);
  CHECK(messages[2].content.find("- you said: step 1") != std::string::npos);
  // Whole turns survive: every tool result still follows the call it answers.
  for (std::size_t i = 3; i < messages.size(); ++i) {
    if (messages[i].role != ca::Role::tool) continue;
    bool answered = false;
    for (std::size_t j = i; j-- > 0 && !answered;)
      for (const auto& each : messages[j].tool_calls) answered |= each.id == messages[i].tool_call_id;
    CHECK(answered);
  }
  CHECK(messages[3].role == ca::Role::assistant);
}

TEST_CASE("the best-result note survives a summary and moves behind it", "[agent][context]") {
  ca::ContextOptions options;
  options.window_tokens = 4'000;
  options.reserve_tokens = 200;
  options.keep_recent_turns = 2;
  options.keep_recent_observations = 1'000;  // elision cannot help: a summary must
  auto window = conversation(options, 5);
  window.append(ca::Message::user("[best: turn 5, reward 2]"), ca::ContextRole::best_result);
  for (int i = 5; i < 30; ++i) {
    const std::string id = "d" + std::to_string(i);
    window.append(ca::Message::assistant("more", {call(id, "Bash", {{"command", "x" + std::to_string(i)}})}));
    window.append(ca::Message::tool_result(id, "Bash", lines(40, "y")));
  }
  (void)window.compact();
  const auto messages = window.messages();
  CHECK(messages[2].content.find("<conversation_summary>") == 0);
  CHECK(messages[3].content == "[best: turn 5, reward 2]");

  // A newer best note demotes the older one, which may then be folded away.
  window.append(ca::Message::user("[best: turn 31, reward 3]"), ca::ContextRole::best_result);
  for (int i = 31; i < 60; ++i) {
    const std::string id = "e" + std::to_string(i);
    window.append(ca::Message::assistant("again", {call(id, "Bash", {{"command", "x" + std::to_string(i)}})}));
    window.append(ca::Message::tool_result(id, "Bash", lines(40, "z")));
  }
  (void)window.compact(true);
  std::size_t old_notes = 0, new_notes = 0;
  for (const auto& message : window.messages()) {
    old_notes += message.content == "[best: turn 5, reward 2]";
    new_notes += message.content == "[best: turn 31, reward 3]";
  }
  CHECK(old_notes == 0);
  CHECK(new_notes == 1);
}

TEST_CASE("recorded operations replay to the same window", "[agent][context]") {
  ca::ContextOptions options;
  options.window_tokens = 3'000;
  options.reserve_tokens = 300;
  options.keep_recent_turns = 2;
  auto add_late_turns = [](ca::ContextWindow& window) {
    for (int i = 12; i < 30; ++i) {
      const std::string id = "c" + std::to_string(i);
      window.append(ca::Message::assistant("step", {call(id, "Bash", {{"command", "make"}})}));
      window.append(ca::Message::tool_result(id, "Bash", lines(50, "late")));
    }
  };
  auto original = conversation(options, 12);
  const auto early = original.compact().operations;
  add_late_turns(original);
  const auto late = original.compact().operations;
  REQUIRE(!early.empty());
  REQUIRE(!late.empty());

  auto replayed = conversation(options, 12);
  for (const auto& operation : early) replayed.apply(operation);
  add_late_turns(replayed);
  for (const auto& operation : late) replayed.apply(operation);
  CHECK(replayed.messages() == original.messages());
  CHECK_THROWS_WITH(replayed.apply({{"kind", "shuffle"}, {"detail", nlohmann::json::object()}}),
                    Catch::Matchers::Contains("unknown context operation"));
}

TEST_CASE("the loop compacts before the window fills and records it", "[agent][context]") {
  const auto root = fresh_directory("loop-compaction");
  const auto task = relu_task();
  std::vector<ca::ChatResponse> answers;
  for (int i = 0; i < 30; ++i)
    answers.push_back(answer({call(std::to_string(i), "Bash", {{"command", "seq 1 400 | sed 's/^/value /'"}})}));
  answers.push_back(answer({call("w", "Write", {{"file_path", "model_new.py"}, {"content", candidate(true, 1.5, 1.2)}}),
                            call("v", "Verify", nlohmann::json::object())}));
  answers.push_back(answer({call("f", "Finish", nlohmann::json::object())}));
  auto options = options_for(root);
  options.context.window_tokens = 12'000;
  options.context.reserve_tokens = 2'000;
  options.context.keep_recent_turns = 3;
  ScriptClient client(answers);
  client.count_prompt_tokens = true;
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options);
  int compactions = 0;
  ca::CallbackObserver observer;
  observer.compaction = [&](int, std::int64_t before, std::int64_t after) {
    ++compactions;
    CHECK(after < before);
  };
  loop.add_observer(observer);
  const auto result = loop.run(task, make_workspace(root, task));

  CHECK(result.reason == ca::StopReason::completed);
  CHECK(compactions >= 1);
  CHECK(result.best->reward.value == 3);
  CHECK_FALSE(events_of_type(result.trajectory, "compaction").empty());
  for (const auto& request : loop.client().requests()) {
    CHECK(request.messages[0].role == ca::Role::system);
    CHECK(request.messages[1].content.find("Task: test/relu") == 0);
    CHECK(ca::ContextWindow::characters_of(request.messages.back()) < 20'000);
    std::size_t characters = 0;
    for (const auto& message : request.messages) characters += ca::ContextWindow::characters_of(message);
    CHECK(characters / 4 < 12'000);
  }
  // The trajectory still holds every message in full.
  const auto messages = ca::conversation(ca::TrajectoryWriter::read_events(result.trajectory));
  CHECK(messages.size() == 2 + 32 + 33 + 1);
  CHECK(messages[3].content.find("value 400") != std::string::npos);
}

TEST_CASE("a context overflow from the backend triggers one compaction and a retry", "[agent][context]") {
  const auto root = fresh_directory("overflow");
  const auto task = relu_task();
  // The backend's real window is far smaller than the configured one.
  auto backend = [](const ca::ChatRequest& request, ca::ChatResponse response) {
    std::size_t characters = 0;
    for (const auto& message : request.messages) characters += message.content.size();
    if (characters > 12'000) throw ca::LlmError(ca::LlmErrorKind::context_overflow, "prompt is too long", 400);
    return response;
  };
  std::vector<ScriptClient::Step> steps;
  for (int i = 0; i < 8; ++i)
    steps.push_back([=](const ca::ChatRequest& request) {
      return backend(request, answer({call(std::to_string(i), "Bash", {{"command", "seq 1 600"}})}));
    });
  steps.push_back([=](const ca::ChatRequest& request) { return backend(request, answer({call("f", "Finish", {})})); });
  auto options = options_for(root);
  options.context.keep_recent_observations = 1;
  ScriptClient client(std::move(steps));
  client.count_prompt_tokens = true;
  TestLoop loop(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{}, options);
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::completed);
  CHECK(result.turns == 9);
  CHECK_FALSE(events_of_type(result.trajectory, "compaction").empty());
}

TEST_CASE("a prompt that cannot shrink enough stops the episode with the reason", "[agent][context]") {
  const auto root = fresh_directory("cannot-shrink");
  const auto task = relu_task();
  auto options = options_for(root);
  options.context.window_tokens = 2'000;
  options.context.reserve_tokens = 500;
  options.system_prompt = [](const ca::Task&, const fs::path&) { return std::string(20'000, 's'); };
  TestLoop loop(ScriptClient(std::vector<ca::ChatResponse>{}), standard_tools(), DirectSandbox{}, VerdictEvaluator{},
                MilestonePolicy{}, options);
  const auto result = loop.run(task, make_workspace(root, task));
  CHECK(result.reason == ca::StopReason::context_exhausted);
  CHECK(result.turns == 0);
  CHECK(result.message.find("does not fit the context window (2000 tokens") != std::string::npos);
  CHECK(loop.client().requests().empty());

  SECTION("and so does a backend that keeps overflowing") {
    const auto other = fresh_directory("always-overflow");
    ScriptClient client(std::vector<ScriptClient::Step>{[](const ca::ChatRequest&) -> ca::ChatResponse {
      throw ca::LlmError(ca::LlmErrorKind::context_overflow, "This model's maximum context length is 10 tokens", 400);
    }});
    TestLoop failing(client, standard_tools(), DirectSandbox{}, VerdictEvaluator{}, MilestonePolicy{},
                     options_for(other));
    const auto outcome = failing.run(task, make_workspace(other, task));
    CHECK(outcome.reason == ca::StopReason::context_exhausted);
    CHECK(failing.client().requests().size() <= 2);
  }
}
