// SPDX-License-Identifier: Apache-2.0
// The HTTP clients against loopback servers with real sockets: recorded exchanges of
// every dialect, then faults (rate limits, outages, resets, stalls, cuts, bad answers),
// deadlines, cancellation, TLS, proxies and threads.
#include "catch.hpp"

#include "llm/llm_test_support.hpp"
#include "loopback_server.hpp"

#include <cuda_agent/http/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuda_agent;
using ca::http::OpenAiDialect;
using ca::testing::llm_fixture;
using ca::testing::LoopbackServer;
using ca::testing::RawServer;
using ca::testing::Reply;
using namespace std::chrono_literals;

namespace {

/// Retries fast enough for tests; the real retry-after test overrides nothing else.
ca::TransportOptions fast_transport() {
  ca::TransportOptions transport;
  transport.retry.max_retries = 3;
  transport.retry.initial_backoff = 2ms;
  transport.retry.max_backoff = 20ms;
  transport.timeouts.connect = 5s;
  transport.timeouts.idle = 10s;
  transport.timeouts.total = 30s;
  return transport;
}

ca::http::OpenAiOptions openai_options(const std::string& url, OpenAiDialect dialect = OpenAiDialect::openai) {
  auto options = ca::http::OpenAiOptions::for_dialect(dialect);
  options.model = "test-model";
  options.base_url = url + "/v1";
  options.api_key = "sk-test-key";
  options.transport = fast_transport();
  return options;
}

ca::http::AnthropicOptions anthropic_options(const std::string& url) {
  ca::http::AnthropicOptions options;
  options.model = "claude-sonnet-4-5";
  options.base_url = url;
  options.api_key = "sk-ant-test";
  options.transport = fast_transport();
  return options;
}

ca::ChatRequest tool_request() {
  ca::ChatRequest request;
  request.messages = {ca::Message::system("You write CUDA kernels."), ca::Message::user("Optimize model.py.")};
  request.tools = {
      {"Read", "Reads a file.", {{"type", "object"}, {"properties", {{"file_path", {{"type", "string"}}}}}}},
      {"Bash", "Runs a command.", {{"type", "object"}, {"properties", {{"command", {{"type", "string"}}}}}}}};
  return request;
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// An HTTP/1.1 response head for RawServer scripts.
std::string raw_head(const std::string& content_type, bool chunked) {
  return "HTTP/1.1 200 OK\r\nContent-Type: " + content_type + "\r\n" +
         (chunked ? "Transfer-Encoding: chunked\r\n" : "") + "Connection: close\r\n\r\n";
}

std::string as_chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

// --- recorded exchanges, one dialect at a time --------------------------------------------------

TEST_CASE("OpenAI: a streamed turn with parallel tool calls over a real socket", "[llm][http][openai]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("openai/stream_parallel_tools.sse"), 5));
  const ca::http::OpenAiClient client(openai_options(server.url()));
  CHECK(client.name() == "openai:test-model@" + server.url() + "/v1");

  auto request = tool_request();
  std::vector<ca::StreamDelta> deltas;
  request.on_delta = [&](const ca::StreamDelta& delta) { deltas.push_back(delta); };
  const auto response = client.complete(request);
  REQUIRE(response.message.tool_calls.size() == 2);
  CHECK(response.message.tool_calls[0].arguments == nlohmann::json({{"file_path", "model.py"}}));
  CHECK(response.message.tool_calls[1].name == "Bash");
  CHECK(response.finish_reason == ca::FinishReason::tool_calls);
  CHECK(response.usage.cached_tokens == 1536);
  CHECK(deltas.size() > 20);

  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].target == "/v1/chat/completions");
  CHECK(requests[0].headers.at("authorization") == "Bearer sk-test-key");
  CHECK(requests[0].headers.at("content-type") == "application/json");
  CHECK(requests[0].headers.at("accept") == "text/event-stream");
  const auto body = nlohmann::json::parse(requests[0].body);
  CHECK(body["model"] == "test-model");
  CHECK(body["stream"] == true);
  CHECK(body["stream_options"]["include_usage"] == true);
  CHECK(body["tools"].size() == 2);
}

TEST_CASE("OpenAI: a whole (non-streamed) answer", "[llm][http][openai]") {
  LoopbackServer server;
  server.enqueue(Reply::json_file(llm_fixture("openai/chat_parallel_tools.json")));
  auto options = openai_options(server.url());
  options.stream = false;
  options.default_max_tokens = 2048;
  const ca::http::OpenAiClient client(options);
  const auto response = client.complete(tool_request());
  CHECK(response.message.tool_calls.size() == 2);
  CHECK(response.usage.prompt_tokens == 1843);
  const auto body = nlohmann::json::parse(server.requests().at(0).body);
  CHECK_FALSE(body.contains("stream"));
  CHECK(body["max_completion_tokens"] == 2048);
  CHECK(server.requests().at(0).headers.at("accept") == "application/json");
}

TEST_CASE("vLLM and SGLang: reasoning under either name, max_tokens, optional keys", "[llm][http][vllm][sglang]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("vllm/stream_reasoning_tools.sse"), 3));
  server.enqueue(Reply::events_file(llm_fixture("sglang/stream_reasoning_content.sse"), 17));

  auto vllm_options = openai_options(server.url(), OpenAiDialect::vllm);
  vllm_options.api_key.reset();
  vllm_options.api_key_env = "CUDA_AGENT_TEST_UNSET_KEY";  // optional for local servers: no header at all
  vllm_options.default_max_tokens = 512;
  const ca::http::OpenAiClient vllm(vllm_options);
  auto request = tool_request();
  request.messages.push_back(ca::Message::assistant("", {ca::ToolCall::from_raw("x", "Bash", "{\"command\": ")}));
  request.messages.push_back(ca::Message::tool_result("x", "Bash", "Error: the arguments are not valid JSON", true));
  const auto first = vllm.complete(request);
  CHECK(first.message.reasoning.text.starts_with("The reference multiplies"));
  CHECK(first.message.tool_calls.at(0).name == "Read");

  const ca::http::OpenAiClient sglang(openai_options(server.url(), OpenAiDialect::sglang));
  const auto second = sglang.complete(tool_request());
  CHECK(second.message.reasoning.text.starts_with("A 3x3 convolution"));

  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK_FALSE(requests[0].headers.contains("authorization"));
  const auto body = nlohmann::json::parse(requests[0].body);
  CHECK(body["max_tokens"] == 512);
  CHECK_FALSE(body.contains("max_completion_tokens"));
  // Local servers parse the history's arguments: malformed ones go back as {}.
  CHECK(body["messages"][2]["tool_calls"][0]["function"]["arguments"] == "{}");
}

TEST_CASE("llama-server: parallel calls asked for by default, overflow by error type", "[llm][http][llama]") {
  LoopbackServer server;
  // Like llama-server: one call unless the request turns parallel calls on.
  server.set_handler([](const ca::testing::RecordedRequest& request) {
    const auto body = nlohmann::json::parse(request.body);
    if (body["messages"].size() > 2)
      return Reply::json_file(llm_fixture("llama_server/error_exceed_context.json"), 400);
    return Reply::json_file(llm_fixture(body.value("parallel_tool_calls", false)
                                            ? "llama_server/chat_parallel_calls.json"
                                            : "llama_server/chat_single_call.json"));
  });
  auto options = openai_options(server.url(), OpenAiDialect::llama_server);
  options.stream = false;
  const ca::http::OpenAiClient client(options);

  auto request = tool_request();
  CHECK(client.complete(request).message.tool_calls.size() == 2);
  request.parallel_tool_calls = false;
  CHECK(client.complete(request).message.tool_calls.size() == 1);
  CHECK(nlohmann::json::parse(server.requests().at(0).body)["parallel_tool_calls"] == true);

  request.messages.push_back(ca::Message::user(std::string(4000, 'x')));
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(request); });
    CHECK(error.kind() == ca::LlmErrorKind::context_overflow);
    CHECK(error.attempts() == 1);
    CHECK(error.http_status() == 400);
    CHECK_CONTAINS(error.what(), "exceed_context_size_error");
  }
  CHECK(server.requests().size() == 3);  // not retried
}

TEST_CASE("Ollama's OpenAI endpoint: whole calls, a placeholder key, `stop` with calls", "[llm][http][ollama]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("ollama/stream_whole_tool_calls.sse"), 64));
  auto options = openai_options(server.url(), OpenAiDialect::ollama);
  options.api_key.reset();
  options.api_key_env = "CUDA_AGENT_TEST_UNSET_KEY";
  const ca::http::OpenAiClient client(options);
  const auto response = client.complete(tool_request());
  CHECK(response.message.tool_calls.size() == 2);
  CHECK(response.finish_reason == ca::FinishReason::tool_calls);
  CHECK(response.usage.prompt_tokens == 1530);
  CHECK(server.requests().at(0).headers.at("authorization") == "Bearer ollama");
}

TEST_CASE("Anthropic: streamed thinking and tool use, sent back unchanged next turn", "[llm][http][anthropic]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("anthropic/stream_thinking_tools.sse"), 11));
  server.enqueue(Reply::json_file(llm_fixture("anthropic/message_thinking_tools.json")));
  auto options = anthropic_options(server.url());
  options.thinking_budget_tokens = 2048;
  options.betas = {"interleaved-thinking-2025-05-14"};
  const ca::http::AnthropicClient client(options);
  CHECK(client.name() == "anthropic:claude-sonnet-4-5@" + server.url());

  auto request = tool_request();
  const auto first = client.complete(request);
  REQUIRE(first.message.tool_calls.size() == 2);
  REQUIRE(first.message.reasoning.opaque_blocks.size() == 1);
  CHECK(first.usage.cached_tokens == 3072);

  request.messages.push_back(first.message);
  request.messages.push_back(ca::Message::tool_result(first.message.tool_calls[0].id, "Read", "class Model: ..."));
  request.messages.push_back(
      ca::Message::tool_result(first.message.tool_calls[1].id, "Grep", "model.py:12: def forward"));
  const auto second = client.complete(request);
  CHECK(second.message.content == "Let me read the reference and check the GPU.");

  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].target == "/v1/messages");
  CHECK(requests[0].headers.at("x-api-key") == "sk-ant-test");
  CHECK(requests[0].headers.at("anthropic-version") == "2023-06-01");
  CHECK(requests[0].headers.at("anthropic-beta") == "interleaved-thinking-2025-05-14");
  CHECK_FALSE(requests[0].headers.contains("authorization"));
  const auto body = nlohmann::json::parse(requests[1].body);
  CHECK(body["system"] == "You write CUDA kernels.");
  CHECK(body["thinking"]["budget_tokens"] == 2048);
  const auto& assistant = body["messages"][1]["content"];
  CHECK(assistant[0] == first.message.reasoning.opaque_blocks[0]);
  CHECK(assistant[0]["signature"].get<std::string>().size() > 40);
  const auto& results = body["messages"][2]["content"];
  REQUIRE(results.size() == 2);
  CHECK(results[0]["type"] == "tool_result");
  CHECK(results[1]["tool_use_id"] == first.message.tool_calls[1].id);
}

// --- faults -------------------------------------------------------------------------------------

TEST_CASE("429 with retry-after: the server's delay is honoured, in real seconds", "[llm][http][faults]") {
  LoopbackServer server;
  server.enqueue(Reply::json_file(llm_fixture("openai/error_rate_limit.json"), 429).with_header("retry-after", "1"));
  server.enqueue(Reply::events_file(llm_fixture("openai/stream_text.sse")));
  auto options = openai_options(server.url());
  std::vector<ca::RetryNotice> notices;
  options.transport.on_retry = [&](const ca::RetryNotice& notice) { notices.push_back(notice); };
  const ca::http::OpenAiClient client(options);
  const auto response = client.complete(tool_request());
  CHECK(response.message.content.starts_with("I will write a fused kernel"));

  REQUIRE(notices.size() == 1);
  CHECK(notices[0].delay == 1000ms);
  CHECK(notices[0].server_requested);
  CHECK(notices[0].http_status == 429);
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  const double waited = seconds_between(requests[0].received_at, requests[1].received_at);
  CHECK(waited >= 1.0);
  CHECK(waited < 5.0);
}

TEST_CASE("429 with retry-after-ms, and 503 then success, with scaled-down backoff", "[llm][http][faults]") {
  LoopbackServer server;
  server.enqueue(Reply::json_file(llm_fixture("openai/error_rate_limit.json"), 429)
                     .with_header("retry-after-ms", "250")
                     .with_header("retry-after", "30"));
  server.enqueue(Reply::json_file(llm_fixture("openai/error_server.json"), 503));
  server.enqueue(Reply::events_file(llm_fixture("openai/stream_text.sse")));
  std::vector<ca::RetryNotice> notices;
  auto options = openai_options(server.url());
  options.transport.on_retry = [&](const ca::RetryNotice& notice) { notices.push_back(notice); };
  const ca::http::OpenAiClient client(options);
  CHECK(client.complete(tool_request()).finish_reason == ca::FinishReason::stop);
  REQUIRE(notices.size() == 2);
  CHECK(notices[0].delay == 250ms);
  CHECK_FALSE(notices[1].server_requested);
  CHECK(notices[1].delay <= 4ms);  // second retry: 2 ms doubled, less jitter
  const auto requests = server.requests();
  REQUIRE(requests.size() == 3);
  CHECK(seconds_between(requests[0].received_at, requests[1].received_at) >= 0.25);
}

TEST_CASE("Authentication failures and exhausted quotas are fatal and not retried", "[llm][http][faults]") {
  LoopbackServer server;
  SECTION("401 names where the key came from") {
    server.enqueue(
        Reply::json_file(llm_fixture("openai/error_invalid_api_key.json"), 401).with_header("x-request-id", "req_42"));
    auto options = openai_options(server.url());
    options.api_key.reset();
    options.api_key_env = "CUDA_AGENT_TEST_KEY";
    ::setenv("CUDA_AGENT_TEST_KEY", "sk-from-environment", 1);
    const ca::http::OpenAiClient client(options);
    ::unsetenv("CUDA_AGENT_TEST_KEY");
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::fatal);
      CHECK(error.http_status() == 401);
      CHECK(error.attempts() == 1);
      CHECK_CONTAINS(error.what(), "check the API key in $CUDA_AGENT_TEST_KEY");
      CHECK_CONTAINS(error.what(), "req_42");
    }
    CHECK(server.requests().at(0).headers.at("authorization") == "Bearer sk-from-environment");
  }
  SECTION("insufficient_quota on a 429") {
    server.enqueue(
        Reply::json_file(llm_fixture("openai/error_insufficient_quota.json"), 429).with_header("retry-after", "1"));
    const ca::http::OpenAiClient client(openai_options(server.url()));
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::fatal);
      CHECK_CONTAINS(error.what(), "exceeded your current quota");
    }
  }
  SECTION("Anthropic's spend limit") {
    server.enqueue(Reply::json_file(llm_fixture("anthropic/error_spend_limit.json"), 429));
    const ca::http::AnthropicClient client(anthropic_options(server.url()));
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::fatal);
      CHECK_CONTAINS(error.what(), "enforced_spend_limit_reached");
    }
  }
  CHECK(server.requests().size() == 1);
}

TEST_CASE("Anthropic 529 overloaded, then success, and prompt too long as an overflow", "[llm][http][faults]") {
  LoopbackServer server;
  server.enqueue(Reply::json_file(llm_fixture("anthropic/error_overloaded.json"), 529));
  server.enqueue(Reply::events_file(llm_fixture("anthropic/stream_overloaded_error.sse")));  // fails mid-stream
  server.enqueue(Reply::json_file(llm_fixture("anthropic/message_thinking_tools.json"), 200));
  server.enqueue(Reply::json_file(llm_fixture("anthropic/error_prompt_too_long.json"), 400));
  const ca::http::AnthropicClient client(anthropic_options(server.url()));
  std::vector<ca::StreamDelta> deltas;
  auto request = tool_request();
  request.on_delta = [&](const ca::StreamDelta& delta) { deltas.push_back(delta); };
  const auto response = client.complete(request);  // a JSON answer to a streamed request is read as such
  CHECK(response.message.tool_calls.size() == 2);
  CHECK(server.requests().size() == 3);
  // The mid-stream failure had shown "Let"; the retry announced a restart.
  bool restarted = false;
  for (const auto& delta : deltas) restarted = restarted || delta.restarted;
  CHECK(restarted);
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(request); });
    CHECK(error.kind() == ca::LlmErrorKind::context_overflow);
  }
}

TEST_CASE("A connection reset mid-stream is retried, and resets on every attempt are reported", "[llm][http][faults]") {
  const std::string stream = ca::testing::llm_fixture_text("openai/stream_parallel_tools.sse");
  const std::string partial = raw_head("text/event-stream", true) + as_chunk(stream.substr(0, stream.size() / 2));
  const std::string whole = raw_head("text/event-stream", false) + stream;
  SECTION("reset, then a whole answer") {
    RawServer server({{partial, true}, {whole, false}});
    const ca::http::OpenAiClient client(openai_options(server.url()));
    std::vector<ca::RetryNotice> notices;
    const auto response = client.complete(tool_request());
    CHECK(response.message.tool_calls.size() == 2);
    CHECK(server.connections() == 2);
  }
  SECTION("resets until the retries run out") {
    RawServer server({{partial, true}});
    auto options = openai_options(server.url());
    options.transport.retry.max_retries = 2;
    std::vector<ca::RetryNotice> notices;
    options.transport.on_retry = [&](const ca::RetryNotice& notice) { notices.push_back(notice); };
    const ca::http::OpenAiClient client(options);
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::retriable);
      CHECK(error.attempts() == 3);
      CHECK(error.http_status() == 0);
      CHECK_CONTAINS(error.what(), "gave up after 3 attempts");
    }
    CHECK(server.connections() == 3);
    REQUIRE(notices.size() == 2);
    CHECK_CONTAINS(notices[0].reason, "transport error");
  }
}

TEST_CASE("A connection dropped mid-body and a stream cut before [DONE] are retried", "[llm][http][faults]") {
  LoopbackServer server;
  const std::string stream = ca::testing::llm_fixture_text("openai/stream_parallel_tools.sse");
  Reply dropped = Reply::events(stream, 40);
  dropped.ending = Reply::Ending::drop;
  dropped.cut_after = stream.size() / 3;
  server.enqueue(std::move(dropped));
  server.enqueue(Reply::events_file(llm_fixture("openai/stream_cut.sse")));  // ends cleanly, answer incomplete
  server.enqueue(Reply::events(stream));
  std::vector<ca::RetryNotice> notices;
  auto options = openai_options(server.url());
  options.transport.on_retry = [&](const ca::RetryNotice& notice) { notices.push_back(notice); };
  const ca::http::OpenAiClient client(options);
  const auto response = client.complete(tool_request());
  CHECK(response.message.tool_calls.size() == 2);
  REQUIRE(notices.size() == 2);
  CHECK_CONTAINS(notices[0].reason, "transport error");
  CHECK_CONTAINS(notices[1].reason, "before the answer was complete");
}

TEST_CASE("A stalled stream trips the idle timeout", "[llm][http][faults]") {
  LoopbackServer server;
  const std::string stream = ca::testing::llm_fixture_text("openai/stream_text.sse");
  Reply stalled = Reply::events(stream, 30);
  stalled.ending = Reply::Ending::stall;
  stalled.cut_after = 200;
  stalled.stall_for = 10s;
  server.enqueue(std::move(stalled));
  auto options = openai_options(server.url());
  options.transport.timeouts.idle = 300ms;
  options.transport.retry.max_retries = 0;
  const ca::http::OpenAiClient client(options);
  const auto start = std::chrono::steady_clock::now();
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
    CHECK(error.kind() == ca::LlmErrorKind::retriable);
    CHECK_CONTAINS(error.what(), "no data for 0.3 s (idle timeout)");
  }
  const double elapsed = seconds_between(start, std::chrono::steady_clock::now());
  CHECK(elapsed >= 0.3);
  CHECK(elapsed < 5.0);
}

TEST_CASE("A slow answer trips the total timeout, and a refused connection is retriable", "[llm][http][faults]") {
  SECTION("total") {
    LoopbackServer server;
    Reply slow = Reply::events(ca::testing::llm_fixture_text("openai/stream_text.sse"), 20);
    slow.piece_delay = 50ms;  // never idle for long, but slow overall
    server.enqueue(std::move(slow));
    auto options = openai_options(server.url());
    options.transport.timeouts.total = 400ms;
    options.transport.timeouts.idle = 10s;
    options.transport.retry.max_retries = 0;
    const ca::http::OpenAiClient client(options);
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::retriable);
      CHECK_CONTAINS(error.what(), "no complete answer within 0.4 s");
    }
  }
  SECTION("refused") {
    std::string url;
    {
      LoopbackServer closed;  // a port that was just free and is now closed
      url = closed.url();
    }
    auto options = openai_options(url);
    options.transport.retry.max_retries = 1;
    const ca::http::OpenAiClient client(options);
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::retriable);
      CHECK(error.attempts() == 2);
    }
  }
}

TEST_CASE("Malformed tool arguments reach the loop as call errors, not exceptions", "[llm][http][faults]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("openai/stream_malformed_arguments.sse"), 4));
  const ca::http::OpenAiClient client(openai_options(server.url()));
  const auto response = client.complete(tool_request());
  REQUIRE(response.message.tool_calls.size() == 2);
  CHECK(response.message.tool_calls[0].argument_error);
  CHECK(response.message.tool_calls[1].argument_error);
  CHECK(response.finish_reason == ca::FinishReason::tool_calls);
}

TEST_CASE("An empty choice list is retried, then reported as an invalid response", "[llm][http][faults]") {
  LoopbackServer server;
  server.set_handler(
      [](const ca::testing::RecordedRequest&) { return Reply::json_file(llm_fixture("openai/empty_choices.json")); });
  auto options = openai_options(server.url());
  options.stream = false;
  options.transport.retry.max_retries = 2;
  const ca::http::OpenAiClient client(options);
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
    CHECK(error.kind() == ca::LlmErrorKind::invalid_response);
    CHECK(error.attempts() == 3);
    CHECK_CONTAINS(error.what(), "no choices");
  }
  CHECK(server.requests().size() == 3);
}

TEST_CASE("vLLM's mid-stream error is retried like the server error it is", "[llm][http][faults]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("vllm/stream_error_midstream.sse")));
  server.enqueue(Reply::events_file(llm_fixture("vllm/stream_reasoning_tools.sse")));
  const ca::http::OpenAiClient client(openai_options(server.url(), OpenAiDialect::vllm));
  CHECK(client.complete(tool_request()).message.tool_calls.size() == 1);
  CHECK(server.requests().size() == 2);
}

// --- cancellation -------------------------------------------------------------------------------

TEST_CASE("Cancellation ends a streaming call and a retry wait promptly", "[llm][http][cancel]") {
  LoopbackServer server;
  SECTION("during a stream") {
    Reply stalled = Reply::events(ca::testing::llm_fixture_text("openai/stream_text.sse"));
    stalled.ending = Reply::Ending::stall;
    stalled.cut_after = 100;
    server.enqueue(std::move(stalled));
  }
  SECTION("while waiting to retry") {
    server.enqueue(Reply::json_file(llm_fixture("openai/error_rate_limit.json"), 429).with_header("retry-after", "20"));
  }
  const ca::http::OpenAiClient client(openai_options(server.url()));
  std::stop_source stop;
  auto request = tool_request();
  request.cancellation = stop.get_token();
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(request); });
    CHECK(error.kind() == ca::LlmErrorKind::cancelled);
  }
  canceller.join();
  CHECK(seconds_between(start, std::chrono::steady_clock::now()) < 5.0);
}

// --- TLS and proxies ----------------------------------------------------------------------------

TEST_CASE("TLS: an unknown CA is fatal with advice, while ca_file, ca_path or no verification connect",
          "[llm][http][tls]") {
  if (!LoopbackServer::tls_supported()) CUDA_AGENT_SKIP("cpp-httplib was built without OpenSSL: no HTTPS test server");
  const auto directory = llm_fixture("tls");
  LoopbackServer server(LoopbackServer::Tls{directory / "server.crt", directory / "server.key"});
  server.set_handler(
      [](const ca::testing::RecordedRequest&) { return Reply::json_file(llm_fixture("openai/chat_text.json")); });
  auto options = openai_options(server.url());
  options.stream = false;
  CHECK(server.url().starts_with("https://127.0.0.1:"));
  {
    const ca::http::OpenAiClient client(options);
    {
      const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)client.complete(tool_request()); });
      CHECK(error.kind() == ca::LlmErrorKind::fatal);
      CHECK(error.attempts() == 1);
      CHECK_CONTAINS(error.what(), "TLS certificate problem");
      CHECK_CONTAINS(error.what(), "ca_file");
    }
  }
  auto with_file = options;
  with_file.transport.tls.ca_file = directory / "server.crt";
  CHECK(
      ca::http::OpenAiClient(with_file).complete(tool_request()).message.content.starts_with("The kernel is correct"));
  auto with_path = options;
  with_path.transport.tls.ca_path = directory / "ca";
  CHECK(ca::http::OpenAiClient(with_path).complete(tool_request()).finish_reason == ca::FinishReason::stop);
  auto unverified = options;
  unverified.transport.tls.verify_peer = false;
  CHECK(ca::http::OpenAiClient(unverified).complete(tool_request()).finish_reason == ca::FinishReason::stop);
}

TEST_CASE("Proxies: explicit, from the environment, or none", "[llm][http][proxy]") {
  LoopbackServer proxy;
  LoopbackServer direct;
  for (auto* server : {&proxy, &direct})
    server->set_handler(
        [](const ca::testing::RecordedRequest&) { return Reply::json_file(llm_fixture("openai/chat_text.json")); });
  ::unsetenv("no_proxy");
  ::unsetenv("NO_PROXY");
  ::unsetenv("all_proxy");
  ::unsetenv("ALL_PROXY");

  SECTION("explicit: the request goes to the proxy, in absolute form") {
    auto options = openai_options("http://llm.invalid");
    options.stream = false;
    options.transport.proxy.url = proxy.url();
    (void)ca::http::OpenAiClient(options).complete(tool_request());
    REQUIRE(proxy.requests().size() == 1);
    CHECK(proxy.requests()[0].target == "http://llm.invalid/v1/chat/completions");
  }
  SECTION("environment: http_proxy is honoured, and ignored when told to") {
    ::setenv("http_proxy", proxy.url().c_str(), 1);
    auto options = openai_options(direct.url());
    options.stream = false;
    (void)ca::http::OpenAiClient(options).complete(tool_request());
    options.transport.proxy.use_environment = false;
    (void)ca::http::OpenAiClient(options).complete(tool_request());
    options.transport.proxy.use_environment = true;
    options.transport.proxy.no_proxy = "127.0.0.1";
    (void)ca::http::OpenAiClient(options).complete(tool_request());
    ::unsetenv("http_proxy");
    REQUIRE(proxy.requests().size() == 1);
    CHECK(proxy.requests()[0].target == direct.url() + "/v1/chat/completions");
    CHECK(direct.requests().size() == 2);
  }
}

// --- threads and the factory --------------------------------------------------------------------

TEST_CASE("One client serves several threads, and independent clients run side by side", "[llm][http][threads]") {
  LoopbackServer server;
  server.set_handler([](const ca::testing::RecordedRequest&) {
    return Reply::events(ca::testing::llm_fixture_text("openai/stream_parallel_tools.sse"), 50);
  });
  const ca::http::OpenAiClient shared(openai_options(server.url()));
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      const ca::http::OpenAiClient own(openai_options(server.url()));
      for (int i = 0; i < 5; ++i) {
        const auto& client = (i + t) % 2 == 0 ? shared : own;
        if (client.complete(tool_request()).message.tool_calls.size() == 2) ++successes;
      }
    });
  for (auto& thread : threads) thread.join();
  CHECK(successes == 20);
  CHECK(server.requests().size() == 20);
}

TEST_CASE("make_llm_client builds HTTP clients from specs, and says when a key is missing", "[llm][http][spec]") {
  LoopbackServer server;
  server.enqueue(Reply::events_file(llm_fixture("vllm/stream_reasoning_tools.sse")));
  server.enqueue(Reply::json_file(llm_fixture("anthropic/message_thinking_tools.json")));

  auto vllm =
      ca::http::make_llm_client("vllm:Qwen/Qwen3-32B@" + server.url() + "/v1?retries=0&max_tokens=100&timeout=20");
  CHECK(vllm.name() == "vllm:Qwen/Qwen3-32B@" + server.url() + "/v1");
  CHECK(vllm.complete(tool_request()).message.tool_calls.size() == 1);
  const auto body = nlohmann::json::parse(server.requests().at(0).body);
  CHECK(body["model"] == "Qwen/Qwen3-32B");
  CHECK(body["max_tokens"] == 100);

  ::setenv("CUDA_AGENT_TEST_ANTHROPIC_KEY", "sk-ant-env", 1);
  auto anthropic = ca::http::make_llm_client("anthropic:claude-opus-4-1@" + server.url() +
                                             "?api_key_env=CUDA_AGENT_TEST_ANTHROPIC_KEY&stream=false&thinking=1024");
  ::unsetenv("CUDA_AGENT_TEST_ANTHROPIC_KEY");
  CHECK(anthropic.complete(tool_request()).message.tool_calls.size() == 2);
  CHECK(server.requests().at(1).headers.at("x-api-key") == "sk-ant-env");
  CHECK(nlohmann::json::parse(server.requests().at(1).body)["thinking"]["budget_tokens"] == 1024);

  ::unsetenv("OPENAI_API_KEY");
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] { (void)ca::http::make_llm_client("openai:gpt-4.1"); });
    CHECK(error.kind() == ca::LlmErrorKind::fatal);
    CHECK_CONTAINS(error.what(), "set the environment variable OPENAI_API_KEY");
    CHECK_CONTAINS(error.what(), "?api_key_env=NAME");
  }
  CHECK_THROWS_AS(ca::http::make_llm_client("vllm:m?max_tokens_field=tokens"), ca::LlmSpecError);
  CHECK(ca::http::make_llm_client("ollama:qwen2.5-coder:32b").name() ==
        "ollama:qwen2.5-coder:32b@http://127.0.0.1:11434/v1");
}
