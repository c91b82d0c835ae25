// SPDX-License-Identifier: Apache-2.0
// The clients that need no network (scripted, replay) and the spec strings that choose
// a client.
#include "catch.hpp"

#include "llm_test_support.hpp"

#include <cuda_agent/llm/llm_spec.hpp>
#include <cuda_agent/llm/replay_client.hpp>
#include <cuda_agent/llm/scripted_client.hpp>
#include <cuda_agent/trajectory.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <stop_token>
#include <string>
#include <vector>

namespace ca = cuda_agent;

namespace {

std::filesystem::path temporary_directory(const std::string& name) {
  auto directory =
      std::filesystem::temp_directory_path() / ("cuda_agent_llm_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  return directory;
}

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

/// An episode as the agent loop records it: system, user, a turn with two parallel
/// calls, their results, a final answer.
struct RecordedEpisode {
  std::vector<ca::Message> first_inputs = {ca::Message::system("You write CUDA kernels."),
                                           ca::Message::user("Optimize model.py.")};
  ca::ChatResponse first;
  std::vector<ca::Message> results;
  ca::ChatResponse second;

  RecordedEpisode() {
    first.message = ca::Message::assistant("Looking around.",
                                           {ca::ToolCall::from_raw("c1", "Bash", R"({"command":"nvcc --version"})"),
                                            ca::ToolCall::from_raw("c2", "Read", R"({"file_path":"model.py"})")});
    first.finish_reason = ca::FinishReason::tool_calls;
    first.usage = {1000, 50, 0, 0, std::nullopt};
    first.model = "recorded-model";
    results = {ca::Message::tool_result("c1", "Bash", "Cuda compilation tools, release 13.0 (took 0.41 s)"),
               ca::Message::tool_result("c2", "Read", "class Model(nn.Module): ...")};
    second.message = ca::Message::assistant("Done: 1.9x faster.");
    second.finish_reason = ca::FinishReason::stop;
    second.usage = {1200, 10, 900, 0, std::nullopt};
  }

  void record(const std::filesystem::path& path) const {
    ca::TrajectoryWriter writer(path);
    writer.append(ca::trajectory_event::header({{"name", "t"}, {"hash", "h"}}, "vllm:recorded-model"));
    for (const auto& message : first_inputs) writer.append(ca::trajectory_event::message(0, message));
    writer.append(ca::trajectory_event::assistant(0, first, 812.5));
    for (const auto& message : results) writer.append(ca::trajectory_event::message(1, message));
    writer.append({{"type", "evaluation"}, {"turn", 1}});
    writer.append(ca::trajectory_event::assistant(1, second, 95.0));
    writer.append({{"type", "finish"}, {"reason", "done"}});
  }

  /// The request a faithful rerun sends at turn `k`.
  [[nodiscard]] ca::ChatRequest request(int k, std::vector<ca::Message> new_results = {}) const {
    ca::ChatRequest request;
    request.messages = first_inputs;
    if (k >= 1) {
      request.messages.push_back(first.message);
      const auto& tail = new_results.empty() ? results : new_results;
      request.messages.insert(request.messages.end(), tail.begin(), tail.end());
    }
    return request;
  }
};

}  // namespace

// --- scripted ---------------------------------------------------------------------------------

TEST_CASE("Scripted client: answers, errors and the end of the script, in order", "[llm][scripted]") {
  const auto script = nlohmann::json::parse(R"({
    "name": "demo",
    "responses": [
      {"content": "Let me look.", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "Read", "arguments": "{\"file_path\": \"model.py\"}"}}]},
      {"error": {"kind": "retriable", "message": "HTTP 503 from the scripted server", "http_status": 503}},
      {"message": {"role": "assistant", "content": "Done.", "reasoning_content": "all checks passed"},
       "finish_reason": "length", "usage": {"prompt_tokens": 900, "completion_tokens": 12}, "model": "m1"}
    ]})");
  auto client = ca::ScriptedClient::from_json(script);
  CHECK(client.name() == "demo");
  static_assert(ca::LlmClient<ca::ScriptedClient>);

  ca::ChatRequest request;
  request.messages = {ca::Message::user("go")};
  std::vector<ca::StreamDelta> deltas;
  request.on_delta = [&](const ca::StreamDelta& delta) { deltas.push_back(delta); };

  const auto first = client.complete(request);
  CHECK(first.finish_reason == ca::FinishReason::tool_calls);
  REQUIRE(first.message.tool_calls.size() == 1);
  CHECK(first.message.tool_calls[0].arguments["file_path"] == "model.py");
  REQUIRE(deltas.size() == 2);  // the text, then the call, as a stream would show them
  CHECK(deltas[1].tool_call_name == "Read");

  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(request); });
    CHECK(error.kind() == ca::LlmErrorKind::retriable);
    CHECK(error.http_status() == 503);
  }

  const auto third = client.complete(request);
  CHECK(third.message.content == "Done.");
  CHECK(third.message.reasoning.text == "all checks passed");
  CHECK(third.finish_reason == ca::FinishReason::length);
  CHECK(third.usage.prompt_tokens == 900);
  CHECK(third.model == "m1");
  CHECK(client.remaining() == 0);

  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(request); });
    CHECK(error.kind() == ca::LlmErrorKind::fatal);
    CHECK_CONTAINS(error.what(), "no response left (it has 3)");
  }
  REQUIRE(client.requests().size() == 4);
  CHECK(client.requests()[0].messages[0].content == "go");
  CHECK_FALSE(client.requests()[0].on_delta);

  std::stop_source stop;
  stop.request_stop();
  request.cancellation = stop.get_token();
  CHECK_THROWS_AS(client.complete(request), ca::LlmError);
}

TEST_CASE("Scripted client: malformed scripts are refused with the entry that is wrong", "[llm][scripted]") {
  CHECK_THROWS_WITH(ca::ScriptedClient::from_json(nlohmann::json::parse(R"({"turns": []})")),
                    "a script needs a \"responses\" list (or is that list itself)");
  CHECK_THROWS_WITH(ca::ScriptedClient::from_json(nlohmann::json::parse(R"([{"content": "ok"}, 7])")),
                    "script entry 1: an entry must be an object");
  CHECK_THROWS_WITH(ca::ScriptedClient::from_json(nlohmann::json::parse(R"([{"error": {"kind": "sometimes"}}])")),
                    "script entry 0: unknown error kind \"sometimes\"");
  CHECK_THROWS_WITH(ca::ScriptedClient::from_json(nlohmann::json::parse(R"([{"role": "user", "content": "x"}])")),
                    "script entry 0: a response must be an assistant message");
  CHECK(ca::ScriptedClient::from_json(nlohmann::json::parse(R"([{"content": "ok"}])")).remaining() == 1);

  const auto directory = temporary_directory("scripted");
  write_text(directory / "bad.json", "{ not json");
  CHECK_THROWS_WITH(ca::ScriptedClient::from_file(directory / "bad.json"),
                    (directory / "bad.json").string() + " is not valid JSON");
  CHECK_THROWS_AS(ca::ScriptedClient::from_file(directory / "missing.json"), std::invalid_argument);
  std::filesystem::remove_all(directory);
}

// --- replay -----------------------------------------------------------------------------------

TEST_CASE("Replay client: a faithful rerun gets the recorded answers and no divergence", "[llm][replay]") {
  const auto directory = temporary_directory("replay");
  RecordedEpisode episode;
  episode.record(directory / "run.jsonl");

  ca::ReplayClient client(directory / "run.jsonl");
  CHECK(client.name() == "replay:" + (directory / "run.jsonl").string());
  CHECK(client.turn_count() == 2);
  const auto first = client.complete(episode.request(0));
  CHECK(first.message == episode.first.message);
  CHECK(first.usage == episode.first.usage);
  CHECK(first.finish_reason == ca::FinishReason::tool_calls);
  CHECK(first.model == "recorded-model");
  const auto second = client.complete(episode.request(1));
  CHECK(second.message.content == "Done: 1.9x faster.");
  CHECK(second.usage.cached_tokens == 900);
  CHECK_FALSE(client.diverged());
  CHECK(client.turns_answered() == 2);

  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(episode.request(1)); });
    CHECK(error.kind() == ca::LlmErrorKind::fatal);
    CHECK_CONTAINS(error.what(), "the recording has 2 turns; the run asked for turn 3");
  }
  CHECK(client.structural_count() == 1);
  std::filesystem::remove_all(directory);
}

TEST_CASE("Replay client: content and structure divergences are told apart", "[llm][replay]") {
  const auto directory = temporary_directory("replay_divergence");
  RecordedEpisode episode;
  episode.record(directory / "run.jsonl");

  SECTION("a different timing is a content divergence, masked by mask_numbers") {
    auto results = episode.results;
    results[0].content = "Cuda compilation tools, release 13.0 (took 0.57 s)";
    ca::ReplayClient client(directory / "run.jsonl");
    (void)client.complete(episode.request(0));
    (void)client.complete(episode.request(1, results));
    REQUIRE(client.divergences().size() == 1);
    const auto& divergence = client.divergences()[0];
    CHECK(divergence.kind == ca::ReplayDivergence::Kind::content);
    CHECK(divergence.turn == 1);
    CHECK(divergence.message_index == 0);
    CHECK_CONTAINS(divergence.expected, "0.41");
    CHECK_CONTAINS(divergence.actual, "0.57");
    CHECK(client.structural_count() == 0);

    ca::ReplayOptions options;
    options.normalize = &ca::ReplayOptions::mask_numbers;
    ca::ReplayClient masked(directory / "run.jsonl", options);
    (void)masked.complete(episode.request(0));
    (void)masked.complete(episode.request(1, results));
    CHECK_FALSE(masked.diverged());
  }
  SECTION("a missing result, a failed tool or another call id is structural") {
    auto results = episode.results;
    results[1].is_error = true;
    results[1].tool_call_id = "c9";
    ca::ReplayClient client(directory / "run.jsonl");
    (void)client.complete(episode.request(0));
    (void)client.complete(episode.request(1, results));
    REQUIRE(client.structural_count() == 2);
    CHECK(client.divergences()[0].detail == "tool call id differs");
    CHECK(client.divergences()[1].detail == "tool error flag differs");

    ca::ReplayClient fewer(directory / "run.jsonl");
    (void)fewer.complete(episode.request(0));
    (void)fewer.complete(episode.request(1, {episode.results[0]}));
    REQUIRE(fewer.divergences().size() == 1);
    CHECK(fewer.divergences()[0].kind == ca::ReplayDivergence::Kind::structure);
    CHECK(fewer.divergences()[0].detail == "expected 2 new messages, got 1");
  }
  SECTION("strict replays stop at the first structural divergence") {
    ca::ReplayOptions options;
    options.stop_on_structural_divergence = true;
    ca::ReplayClient client(directory / "run.jsonl", options);
    auto request = episode.request(0);
    request.messages[1].role = ca::Role::system;
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(request); });
      CHECK(error.kind() == ca::LlmErrorKind::fatal);
      CHECK_CONTAINS(error.what(), "departs from the recording: message role differs");
    }
    CHECK(client.turns_answered() == 0);
  }
  std::filesystem::remove_all(directory);
}

TEST_CASE("Replay client: trajectories without answers are refused", "[llm][replay]") {
  CHECK_THROWS_AS(ca::ReplayClient(std::vector<nlohmann::json>{}, "replay:empty"), std::invalid_argument);
  const std::vector<nlohmann::json> broken = {{{"type", "message"}, {"seq", 3}, {"message", {{"role", "robot"}}}}};
  CHECK_CONTAINS(ca::testing::thrown_message([&] { ca::ReplayClient client(broken, "replay:broken"); }),
                 "message event 3 is malformed");
}

// --- specs ------------------------------------------------------------------------------------

TEST_CASE("Spec strings name a provider, a model and a server", "[llm][spec]") {
  auto spec = ca::parse_llm_spec("openai:gpt-4.1@https://gateway.example/v1?stream=false&retries=2&timeout=90");
  CHECK(spec.provider == "openai");
  CHECK(spec.model == "gpt-4.1");
  CHECK(spec.base_url == "https://gateway.example/v1");
  CHECK(spec.flag("stream") == false);
  CHECK(spec.integer("retries") == 2);
  CHECK(spec.seconds("timeout") == std::chrono::milliseconds(90'000));
  CHECK(spec.needs_http());

  spec = ca::parse_llm_spec("ollama:qwen2.5-coder:32b");
  CHECK(spec.model == "qwen2.5-coder:32b");
  CHECK(spec.base_url.empty());
  spec = ca::parse_llm_spec("vllm:Qwen/Qwen3-32B@http://127.0.0.1:8000/v1");
  CHECK(spec.model == "Qwen/Qwen3-32B");
  CHECK(spec.base_url == "http://127.0.0.1:8000/v1");
  spec = ca::parse_llm_spec("anthropic:claude-sonnet-4-5?thinking=4096");
  CHECK(spec.integer("thinking") == 4096);
  spec = ca::parse_llm_spec("llama-server:any@http://10.0.0.5:8080");
  CHECK(spec.provider == "llama-server");
  spec = ca::parse_llm_spec("replay:runs/episode 1.jsonl?strict=true");
  CHECK(spec.file == "runs/episode 1.jsonl");
  CHECK(spec.flag("strict") == true);
  CHECK_FALSE(spec.needs_http());
}

TEST_CASE("Malformed spec strings say what is wrong and how to write them", "[llm][spec]") {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      (void)ca::parse_llm_spec(text);
    } catch (const ca::LlmSpecError& error) {
      return error.what();
    }
    return "(accepted)";
  };
  CHECK_CONTAINS(error_of("gpt-4.1"), "expected <provider>:<model>[@<base-url>]");
  CHECK_CONTAINS(error_of("openia:gpt-4.1"), "unknown provider 'openia' (known: openai, vllm, sglang, llama-server");
  CHECK_CONTAINS(error_of("openai:"), "missing model name: write openai:<model>[@<base-url>]");
  CHECK_CONTAINS(error_of("openai:@https://api.openai.com/v1"), "missing model name");
  CHECK_CONTAINS(error_of("vllm:m@127.0.0.1:8000/v1"), "needs a scheme: write http://127.0.0.1:8000/v1");
  CHECK_CONTAINS(error_of("vllm:m@ftp://host/v1"), "must use http:// or https://");
  CHECK_CONTAINS(error_of("vllm:m@http://"), "has no host");
  CHECK_CONTAINS(error_of("openai:gpt?temperature=0"), "unknown option 'temperature' for openai (known: api_key_env");
  CHECK_CONTAINS(error_of("scripted:a.json?strict=true"), "unknown option 'strict' for scripted (it takes none)");
  CHECK_CONTAINS(error_of("openai:gpt?stream"), "option 'stream' needs a value: stream=...");
  CHECK_CONTAINS(error_of("openai-compatible:m"), "openai-compatible needs a base URL");
  CHECK_CONTAINS(error_of("replay:"), "expected replay:<file>");
  CHECK(error_of("vllm:model@variant") == "(accepted)");  // '@' inside a model name

  const auto spec = ca::parse_llm_spec("openai:gpt?stream=maybe&retries=-1&timeout=0");
  CHECK_THROWS_WITH(
      spec.flag("stream"),
      "LLM spec 'openai:gpt?stream=maybe&retries=-1&timeout=0': option stream=maybe must be true or false");
  CHECK_THROWS_AS(spec.integer("retries"), ca::LlmSpecError);
  CHECK_THROWS_AS(spec.seconds("timeout"), ca::LlmSpecError);
}

TEST_CASE("make_llm_client builds the offline clients and explains what HTTP ones need", "[llm][spec]") {
  const auto directory = temporary_directory("spec");
  write_text(directory / "script.json", R"([{"content": "hello from the script"}])");
  auto scripted = ca::make_llm_client("scripted:" + (directory / "script.json").string());
  ca::ChatRequest request;
  request.messages = {ca::Message::user("hi")};
  CHECK(scripted.complete(request).message.content == "hello from the script");
  CHECK(scripted.target<ca::ScriptedClient>() != nullptr);

  RecordedEpisode episode;
  episode.record(directory / "run.jsonl");
  auto replay = ca::make_llm_client("replay:" + (directory / "run.jsonl").string() + "?mask_numbers=true");
  CHECK(replay.complete(episode.request(0)).message == episode.first.message);

  CHECK_CONTAINS(ca::testing::thrown_message(
                     [&] { (void)ca::make_llm_client("replay:" + (directory / "nothing.jsonl").string()); }),
                 "no trajectory file at");
  CHECK_CONTAINS(ca::testing::thrown_message([] { (void)ca::make_llm_client("vllm:Qwen/Qwen3-32B"); }),
                 "'vllm' needs the HTTP component: include <cuda_agent/http/make_client.hpp>");
  std::filesystem::remove_all(directory);
}
