// SPDX-License-Identifier: Apache-2.0
// The protocol logic of the HTTP clients, without a network: SSE parsing, request
// bodies, responses and streams of every dialect, error classification, backoff.
#include "catch.hpp"

#include "llm_test_support.hpp"

#include <cuda_agent/llm/detail/anthropic_wire.hpp>
#include <cuda_agent/llm/detail/llm_failure.hpp>
#include <cuda_agent/llm/detail/openai_wire.hpp>
#include <cuda_agent/llm/detail/sse_parser.hpp>

#include <chrono>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuda_agent;
using ca::testing::assemble_stream;
using ca::testing::llm_fixture_text;
using namespace std::chrono_literals;

namespace {

std::vector<ca::detail::SseEvent> parse_sse(std::string_view text, std::size_t piece) {
  std::vector<ca::detail::SseEvent> events;
  ca::detail::SseParser parser;
  const auto keep = [&](ca::detail::SseEvent&& event) { events.push_back(std::move(event)); };
  for (std::size_t offset = 0; offset < text.size(); offset += piece) parser.feed(text.substr(offset, piece), keep);
  parser.finish(keep);
  return events;
}

ca::ChatRequest agent_request() {
  ca::ChatRequest request;
  request.messages.push_back(ca::Message::system("You write CUDA kernels."));
  request.messages.push_back(ca::Message::user("Make model.py faster."));
  auto assistant = ca::Message::assistant("", {ca::ToolCall::from_raw("call_1", "Read", R"({"file_path":"model.py"})"),
                                               ca::ToolCall::from_raw("call_2", "Bash", R"({"command": "ls)")});
  assistant.reasoning.text = "look first";
  request.messages.push_back(assistant);
  request.messages.push_back(ca::Message::tool_result("call_1", "Read", "class Model: ..."));
  request.messages.push_back(ca::Message::tool_result("call_2", "Bash", "Error: arguments are not valid JSON", true));
  request.tools.push_back(
      {"Read", "Reads a file.", {{"type", "object"}, {"properties", {{"file_path", {{"type", "string"}}}}}}});
  request.tools.push_back({"Bash", "", {{"type", "object"}}});
  return request;
}

ca::detail::LlmFailure classify(int status, const std::string& fixture, ca::detail::HttpHeaders headers = {}) {
  return ca::detail::classify_http_error(status, headers, llm_fixture_text(fixture), "test", "check $KEY");
}

}  // namespace

// --- SSE --------------------------------------------------------------------------------------

TEST_CASE("SSE: events split on any line ending, wherever the network cuts", "[llm][sse]") {
  const std::string text =
      "\xEF\xBB\xBF: a comment\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\n"
      "data:no-space\rdata:  two spaces\r\rid: 7\nretry: 100\nunknown\ndata\n\n"
      "data: last without blank line";
  for (const std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, text.size()}) {
    CAPTURE(piece);
    const auto events = parse_sse(text, piece);
    REQUIRE(events.size() == 4);
    CHECK(events[0].event == "message_start");
    CHECK(events[0].data == "{\"a\":1}");
    CHECK(events[1].event.empty());
    CHECK(events[1].data == "no-space\n two spaces");  // one space after the colon is dropped, not two
    CHECK(events[2].data.empty());                     // "data" alone: an empty line of data
    CHECK(events[2].id == "7");
    CHECK(events[3].data == "last without blank line");
    CHECK(events[3].id == "7");  // ids persist
  }
}

TEST_CASE("SSE: blank lines without data dispatch nothing, and a bad BOM start is kept", "[llm][sse]") {
  CHECK(parse_sse("\n\n\r\n: ping\n\nevent: x\n\n", 1).empty());
  const auto events = parse_sse(
      "\xEF\xBB"
      "data: x\n\n",
      1);                   // two BOM bytes, then not the third
  REQUIRE(events.empty());  // the line "\xEF\xBB" "data" is an unknown field
  const auto bom_only = parse_sse(
      "\xEF\xBB\xBF"
      "data: y\n\n",
      2);
  REQUIRE(bom_only.size() == 1);
  CHECK(bom_only[0].data == "y");
}

TEST_CASE("SSE: an event larger than the limit is refused, not buffered", "[llm][sse]") {
  ca::detail::SseParser parser(64);
  const auto ignore = [](ca::detail::SseEvent&&) {};
  parser.feed("data: " + std::string(40, 'x') + "\n", ignore);
  CHECK_THROWS_AS(parser.feed("data: " + std::string(40, 'y') + "\n", ignore), std::length_error);
}

// --- OpenAI requests --------------------------------------------------------------------------

TEST_CASE("OpenAI request bodies carry history, tools and sampling as the API names them", "[llm][openai]") {
  auto request = agent_request();
  request.tool_choice = ca::ToolChoice::named("Read");
  request.max_tokens = 4096;
  request.temperature = 0.2;
  request.top_p = 0.95;
  request.seed = 7;
  request.stop_sequences = {"</answer>"};
  request.extra_body = {{"reasoning_effort", "high"}, {"stream_options", nullptr}, {"top_k", 20}};

  ca::detail::OpenAiWireSettings settings;
  settings.model = "gpt-4.1";
  const auto body = ca::detail::openai_request_body(request, settings);
  CHECK(body["model"] == "gpt-4.1");
  REQUIRE(body["messages"].size() == 5);
  CHECK(body["messages"][0] == nlohmann::json({{"role", "system"}, {"content", "You write CUDA kernels."}}));
  const auto& assistant = body["messages"][2];
  CHECK(assistant["content"].is_null());
  CHECK(assistant["tool_calls"][0]["function"]["arguments"] == R"({"file_path":"model.py"})");
  CHECK(assistant["tool_calls"][1]["function"]["arguments"] == R"({"command": "ls)");  // OpenAI keeps text as sent
  CHECK_FALSE(assistant.contains("reasoning_content"));
  CHECK(body["messages"][4] ==
        nlohmann::json(
            {{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "Error: arguments are not valid JSON"}}));
  CHECK(body["tools"][0]["function"]["name"] == "Read");
  CHECK(body["tools"][0]["function"]["description"] == "Reads a file.");
  CHECK_FALSE(body["tools"][1]["function"].contains("description"));
  CHECK(body["tool_choice"] == nlohmann::json({{"type", "function"}, {"function", {{"name", "Read"}}}}));
  CHECK_FALSE(body.contains("parallel_tool_calls"));
  CHECK(body["max_completion_tokens"] == 4096);
  CHECK_FALSE(body.contains("max_tokens"));
  CHECK(body["temperature"] == 0.2);
  CHECK(body["seed"] == 7);
  CHECK(body["stop"] == nlohmann::json::array({"</answer>"}));
  CHECK(body["stream"] == true);
  CHECK_FALSE(body.contains("stream_options"));  // removed by the null in extra_body
  CHECK(body["reasoning_effort"] == "high");
  CHECK(body["top_k"] == 20);
}

TEST_CASE("OpenAI-compatible servers get their own field names and safe arguments", "[llm][openai]") {
  auto request = agent_request();
  ca::detail::OpenAiWireSettings settings;
  settings.model = "local";
  settings.max_tokens_field = "max_tokens";
  settings.default_max_tokens = 1024;
  settings.default_parallel_tool_calls = true;
  settings.echo_invalid_arguments = false;
  settings.reasoning_echo_field = "reasoning_content";
  settings.stream = false;
  auto body = ca::detail::openai_request_body(request, settings);
  CHECK(body["max_tokens"] == 1024);
  CHECK(body["parallel_tool_calls"] == true);
  CHECK(body["messages"][2]["tool_calls"][1]["function"]["arguments"] == "{}");  // unparsable: not sent back
  CHECK(body["messages"][2]["reasoning_content"] == "look first");
  CHECK_FALSE(body.contains("stream"));
  CHECK_FALSE(body.contains("tool_choice"));  // automatic is the default

  request.parallel_tool_calls = false;
  request.tool_choice = ca::ToolChoice::required();
  body = ca::detail::openai_request_body(request, settings);
  CHECK(body["parallel_tool_calls"] == false);
  CHECK(body["tool_choice"] == "required");

  request.tools.clear();  // tool settings without tools are an error on OpenAI
  request.tool_choice = ca::ToolChoice::none();
  body = ca::detail::openai_request_body(request, settings);
  CHECK_FALSE(body.contains("tools"));
  CHECK_FALSE(body.contains("tool_choice"));
  CHECK_FALSE(body.contains("parallel_tool_calls"));
}

// --- OpenAI responses -------------------------------------------------------------------------

TEST_CASE("OpenAI: a whole response with parallel tool calls and detailed usage", "[llm][openai]") {
  const auto response = ca::detail::parse_openai_response(
      nlohmann::json::parse(llm_fixture_text("openai/chat_parallel_tools.json")), "test");
  CHECK(response.id == "chatcmpl-C9tU1a2b3c4d5e6f");
  CHECK(response.model == "gpt-4.1-2025-04-14");
  CHECK(response.finish_reason == ca::FinishReason::tool_calls);
  REQUIRE(response.message.tool_calls.size() == 2);
  CHECK(response.message.tool_calls[0].id == "call_Qx7rN2bV5mKp");
  CHECK(response.message.tool_calls[0].arguments == nlohmann::json({{"file_path", "model.py"}}));
  CHECK(response.message.tool_calls[1].name == "Bash");
  CHECK(response.message.content.empty());
  CHECK(response.usage == ca::Usage{1843, 96, 1536, 0, std::nullopt});
}

TEST_CASE("OpenAI-compatible whole responses: vLLM reasoning, llama-server calls, quirks", "[llm][openai]") {
  const auto vllm =
      ca::detail::parse_openai_response(nlohmann::json::parse(llm_fixture_text("vllm/chat_reasoning.json")), "vllm");
  CHECK(vllm.message.reasoning.text == "nvcc reported no errors, so the next step is the verifier.");
  CHECK(vllm.message.content == "Both kernels compile; verifying next.");
  CHECK(vllm.finish_reason == ca::FinishReason::stop);

  const auto llama = ca::detail::parse_openai_response(
      nlohmann::json::parse(llm_fixture_text("llama_server/chat_parallel_calls.json")), "llama");
  REQUIRE(llama.message.tool_calls.size() == 2);
  CHECK(llama.message.tool_calls[1].arguments["path"] == "kernels");
  CHECK(llama.usage.prompt_tokens == 1210);

  // Arguments as an object, a missing id, content as parts, a refusal.
  const auto odd = ca::detail::parse_openai_response(nlohmann::json::parse(R"({
      "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}],
        "tool_calls": [{"type": "function", "function": {"name": "Glob", "arguments": {"pattern": "*.cu"}}}]}}]})"),
                                                     "odd");
  CHECK(odd.message.content == "ab");
  REQUIRE(odd.message.tool_calls.size() == 1);
  CHECK(odd.message.tool_calls[0].arguments["pattern"] == "*.cu");
  CHECK(odd.message.tool_calls[0].id.starts_with("call_0_"));
  CHECK(odd.finish_reason == ca::FinishReason::tool_calls);  // calls made, whatever the server said

  const auto refusal = ca::detail::parse_openai_response(nlohmann::json::parse(R"({"choices": [{"index": 0,
      "finish_reason": "stop", "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}]})"),
                                                         "r");
  CHECK(refusal.message.content == "I can't help with that.");
  CHECK(refusal.finish_reason == ca::FinishReason::content_filter);
}

TEST_CASE("OpenAI: an empty choice list or an error object is a failure, not an answer", "[llm][openai]") {
  {
    const auto failure = ca::testing::error_of<ca::detail::LlmFailure>([&] {
      (void)ca::detail::parse_openai_response(nlohmann::json::parse(llm_fixture_text("openai/empty_choices.json")),
                                              "test");
    });
    CHECK(failure.kind() == ca::LlmErrorKind::invalid_response);
    CHECK(failure.retry());
    CHECK_CONTAINS(failure.what(), "no choices");
  }
  {
    const auto failure = ca::testing::error_of<ca::detail::LlmFailure>([&] {
      (void)ca::detail::parse_openai_response(
          nlohmann::json::parse(llm_fixture_text("openai/error_context_length.json")), "test");
    });
    CHECK(failure.kind() == ca::LlmErrorKind::context_overflow);
  }
  CHECK_THROWS_AS(ca::detail::parse_openai_response(nlohmann::json::array(), "test"), ca::detail::LlmFailure);
  CHECK_THROWS_AS(ca::detail::parse_openai_response(nlohmann::json::parse(R"({"choices":[{"index":0}]})"), "test"),
                  ca::detail::LlmFailure);
}

// --- OpenAI streams ---------------------------------------------------------------------------

TEST_CASE("OpenAI stream: parallel tool calls split across many chunks, assembled the same at any cut",
          "[llm][openai][stream]") {
  const std::string stream = llm_fixture_text("openai/stream_parallel_tools.sse");
  const auto whole = assemble_stream<ca::detail::OpenAiStreamAssembler>(stream, stream.size());
  REQUIRE(whole.message.tool_calls.size() == 2);
  CHECK(whole.message.tool_calls[0].id == "call_Qx7rN2bV5mKp");
  CHECK(whole.message.tool_calls[0].name == "Read");
  CHECK(whole.message.tool_calls[0].arguments == nlohmann::json({{"file_path", "model.py"}}));
  CHECK(whole.message.tool_calls[1].arguments["command"] ==
        "nvcc --version && nvidia-smi --query-gpu=name --format=csv");
  CHECK(whole.finish_reason == ca::FinishReason::tool_calls);
  CHECK(whole.usage == ca::Usage{1843, 96, 1536, 0, std::nullopt});
  CHECK(whole.id == "chatcmpl-C9tV3m4n5o6p7q8r");

  for (const std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{100}}) {
    CAPTURE(piece);
    std::vector<ca::StreamDelta> deltas;
    const auto response = assemble_stream<ca::detail::OpenAiStreamAssembler>(stream, piece, &deltas);
    CHECK(response.message == whole.message);
    CHECK(response.usage == whole.usage);
    // The increments rebuild each call's arguments.
    std::string first_arguments;
    for (const auto& delta : deltas)
      if (delta.tool_call_index == 0u) first_arguments += delta.tool_call_arguments;
    CHECK(first_arguments == whole.message.tool_calls[0].raw_arguments);
  }
}

TEST_CASE("OpenAI-compatible streams of every dialect", "[llm][openai][stream]") {
  SECTION("OpenAI text, with and without the final usage chunk") {
    const auto full = assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("openai/stream_text.sse"), 5);
    CHECK(full.message.content == "I will write a fused kernel that keeps the intermediate in shared memory.");
    CHECK(full.usage.completion_tokens == 17);
    const auto cut =
        assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("openai/stream_text_no_usage.sse"), 5);
    CHECK(cut.message.content == full.message.content);
    CHECK(cut.finish_reason == ca::FinishReason::stop);
    CHECK(cut.usage == ca::Usage{});  // the counts were lost, the answer was not
  }
  SECTION("vLLM puts reasoning in `reasoning`") {
    std::vector<ca::StreamDelta> deltas;
    const auto response = assemble_stream<ca::detail::OpenAiStreamAssembler>(
        llm_fixture_text("vllm/stream_reasoning_tools.sse"), 3, &deltas);
    CHECK(response.message.reasoning.text ==
          "The reference multiplies then adds a bias; fusing both into one kernel saves a global-memory round trip.");
    CHECK(response.message.content == "Reading the model first.");
    REQUIRE(response.message.tool_calls.size() == 1);
    CHECK(response.message.tool_calls[0].arguments ==
          nlohmann::json({{"file_path", "/workspace/model.py"}, {"limit", 200}}));
    CHECK(response.usage.prompt_tokens == 3021);
    std::string shown_reasoning;
    for (const auto& delta : deltas) shown_reasoning += delta.reasoning;
    CHECK(shown_reasoning == response.message.reasoning.text);
  }
  SECTION("SGLang puts reasoning in `reasoning_content`") {
    const auto response =
        assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("sglang/stream_reasoning_content.sse"), 11);
    CHECK(response.message.reasoning.text ==
          "A 3x3 convolution with stride 1: tile the input into shared memory with a halo of one.");
    REQUIRE(response.message.tool_calls.size() == 1);
    CHECK(response.message.tool_calls[0].arguments["file_path"] == "kernels/conv.cu");
    CHECK(response.usage.completion_tokens == 128);
  }
  SECTION("llama-server streams calls in two-character pieces with timings") {
    const auto response = assemble_stream<ca::detail::OpenAiStreamAssembler>(
        llm_fixture_text("llama_server/stream_parallel_calls.sse"), 4);
    REQUIRE(response.message.tool_calls.size() == 2);
    CHECK(response.message.tool_calls[0].name == "Glob");
    CHECK(response.message.tool_calls[1].arguments == nlohmann::json({{"pattern", "__global__"}, {"path", "kernels"}}));
    CHECK(response.message.reasoning.text == "Check the existing kernels first.");
  }
  SECTION("Ollama sends whole calls and says `stop`") {
    const auto response =
        assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("ollama/stream_whole_tool_calls.sse"), 9);
    REQUIRE(response.message.tool_calls.size() == 2);
    CHECK(response.message.tool_calls[1].arguments["command"] == "python -c \"import cuda_extension\"");
    CHECK(response.finish_reason == ca::FinishReason::tool_calls);
    CHECK(response.usage.total_tokens() == 1571);
  }
}

TEST_CASE("OpenAI stream: malformed arguments become per-call errors, the raw text is kept", "[llm][openai][stream]") {
  const auto response =
      assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("openai/stream_malformed_arguments.sse"), 6);
  REQUIRE(response.message.tool_calls.size() == 2);
  for (const auto& call : response.message.tool_calls) {
    CAPTURE(call.raw_arguments);
    REQUIRE(call.argument_error);
    CHECK_CONTAINS(*call.argument_error, "not valid JSON");
    CHECK(call.arguments == nlohmann::json::object());
  }
  CHECK(response.message.tool_calls[1].raw_arguments == R"({"command": "nvcc -c kernels/add.cu)");
  CHECK(response.finish_reason == ca::FinishReason::tool_calls);
}

TEST_CASE("OpenAI stream: a stream cut before the finish is incomplete and retriable", "[llm][openai][stream]") {
  {
    const auto failure = ca::testing::error_of<ca::detail::LlmFailure>([&] {
      (void)assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("openai/stream_cut.sse"), 7);
    });
    CHECK(failure.kind() == ca::LlmErrorKind::retriable);
    CHECK(failure.retry());
    CHECK_CONTAINS(failure.what(), "before the answer was complete");
  }
  // Only [DONE], no finish reason: complete, the reason unknown.
  const auto done_only = assemble_stream<ca::detail::OpenAiStreamAssembler>(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", 4);
  CHECK(done_only.message.content == "hi");
  CHECK(done_only.finish_reason == ca::FinishReason::unknown);
}

TEST_CASE("OpenAI stream: an error inside the stream is raised as what it says", "[llm][openai][stream]") {
  {
    const auto failure = ca::testing::error_of<ca::detail::LlmFailure>([&] {
      (void)assemble_stream<ca::detail::OpenAiStreamAssembler>(llm_fixture_text("vllm/stream_error_midstream.sse"), 8);
    });
    CHECK(failure.kind() == ca::LlmErrorKind::retriable);
    CHECK(failure.http_status() == 500);
    CHECK_CONTAINS(failure.what(), "engine is overloaded");
  }
  CHECK_THROWS_AS(assemble_stream<ca::detail::OpenAiStreamAssembler>("data: {not json\n\n", 3), ca::detail::LlmFailure);
  {
    const auto failure = ca::testing::error_of<ca::detail::LlmFailure>([&] {
      (void)assemble_stream<ca::detail::OpenAiStreamAssembler>(
          R"(data: {"error":{"message":"This model's maximum context length is 8192 tokens","code":400}})"
          "\n\n",
          64);
    });
    CHECK(failure.kind() == ca::LlmErrorKind::context_overflow);
  }
}

TEST_CASE("Tool-call fragments are assembled whatever liberties servers take", "[llm][openai][stream]") {
  ca::detail::ToolCallAssembler assembler;
  // Interleaved indexes, nulls where strings belong, a name split in two, a repeated id and name.
  for (const char* fragment : {
           R"({"index": 1, "id": "b", "type": "function", "function": {"name": "Gr", "arguments": null}})",
           R"({"index": 0, "id": "a", "type": "function", "function": {"name": "Read", "arguments": "{\"file_"}})",
           R"({"index": 1, "id": null, "function": {"name": "ep", "arguments": "{\"pattern\":"}})",
           R"({"index": 0, "id": "a", "function": {"name": "Read", "arguments": "path\": \"a.cu\"}"}})",
           R"({"index": 1, "function": {"arguments": " \"x\"}"}})",
           R"("not an object")",
       })
    (void)assembler.add(nlohmann::json::parse(fragment));
  auto calls = assembler.calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].id == "a");
  CHECK(calls[0].name == "Read");
  CHECK(calls[0].arguments == nlohmann::json({{"file_path", "a.cu"}}));
  CHECK(calls[1].name == "Grep");
  CHECK(calls[1].arguments == nlohmann::json({{"pattern", "x"}}));

  // Without indexes: a new id starts a call, a fragment without one continues the last.
  ca::detail::ToolCallAssembler unindexed;
  for (const char* fragment : {
           R"({"id": "c1", "function": {"name": "Bash", "arguments": "{\"command\":"}})",
           R"({"function": {"arguments": " \"ls\"}"}})",
           R"({"id": "c2", "function": {"name": "Glob", "arguments": {"pattern": "*"}}})",
       })
    (void)unindexed.add(nlohmann::json::parse(fragment));
  calls = unindexed.calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].arguments == nlohmann::json({{"command", "ls"}}));
  CHECK(calls[1].arguments == nlohmann::json({{"pattern", "*"}}));
  CHECK(calls[1].raw_arguments == R"({"pattern":"*"})");
}

// --- Anthropic --------------------------------------------------------------------------------

TEST_CASE("Anthropic request bodies: system on top, results first in one user turn, thinking unchanged",
          "[llm][anthropic]") {
  auto request = agent_request();
  const nlohmann::json thinking = {{"type", "thinking"}, {"thinking", "look first"}, {"signature", "c2lnbmF0dXJl"}};
  request.messages[2].reasoning.opaque_blocks = {thinking, {{"type", "redacted_thinking"}, {"data", "ZW5jcnlwdGVk"}}};
  request.messages.push_back(ca::Message::user("Also check the GPU."));
  request.messages.push_back(ca::Message::assistant(""));  // empty: dropped
  request.messages.push_back(ca::Message::system("Budget: 10 turns left."));
  request.parallel_tool_calls = false;
  request.seed = 3;

  ca::detail::AnthropicWireSettings settings;
  settings.model = "claude-sonnet-4-5";
  settings.thinking_budget_tokens = 2048;
  const auto body = ca::detail::anthropic_request_body(request, settings);
  CHECK(body["system"] == "You write CUDA kernels.\n\nBudget: 10 turns left.");
  CHECK(body["max_tokens"] == 8192);
  CHECK(body["thinking"] == nlohmann::json({{"type", "enabled"}, {"budget_tokens", 2048}}));
  CHECK(body["stream"] == true);
  CHECK_FALSE(body.contains("seed"));
  const auto& messages = body["messages"];
  REQUIRE(messages.size() == 3);
  CHECK(messages[0] ==
        nlohmann::json({{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Make model.py faster."}}}}}));
  const auto& assistant = messages[1]["content"];
  REQUIRE(assistant.size() == 4);
  CHECK(assistant[0] == thinking);  // byte for byte, ahead of the calls
  CHECK(assistant[1]["type"] == "redacted_thinking");
  CHECK(assistant[2] ==
        nlohmann::json(
            {{"type", "tool_use"}, {"id", "call_1"}, {"name", "Read"}, {"input", {{"file_path", "model.py"}}}}));
  CHECK(assistant[3]["input"] == nlohmann::json::object());  // unparsable arguments: an empty object
  const auto& user = messages[2]["content"];
  REQUIRE(user.size() == 3);
  CHECK(user[0] ==
        nlohmann::json({{"type", "tool_result"}, {"tool_use_id", "call_1"}, {"content", "class Model: ..."}}));
  CHECK(user[1]["is_error"] == true);
  CHECK(user[2] == nlohmann::json({{"type", "text"}, {"text", "Also check the GPU."}}));
  CHECK(body["tools"][0] ==
        nlohmann::json(
            {{"name", "Read"}, {"description", "Reads a file."}, {"input_schema", request.tools[0].parameters}}));
  CHECK(body["tool_choice"] == nlohmann::json({{"type", "auto"}, {"disable_parallel_tool_use", true}}));

  request.parallel_tool_calls.reset();
  request.tool_choice = ca::ToolChoice::required();
  CHECK(ca::detail::anthropic_request_body(request, settings)["tool_choice"] == nlohmann::json({{"type", "any"}}));
  request.tool_choice = ca::ToolChoice::automatic();
  CHECK_FALSE(ca::detail::anthropic_request_body(request, settings).contains("tool_choice"));
}

TEST_CASE("Anthropic: whole and streamed answers give the same message, thinking kept for the way back",
          "[llm][anthropic]") {
  const auto whole = ca::detail::parse_anthropic_response(
      nlohmann::json::parse(llm_fixture_text("anthropic/message_thinking_tools.json")), "test");
  CHECK(whole.finish_reason == ca::FinishReason::tool_calls);
  CHECK(whole.message.content == "Let me read the reference and check the GPU.");
  REQUIRE(whole.message.tool_calls.size() == 2);
  CHECK(whole.message.tool_calls[1].arguments == nlohmann::json({{"command", "nvidia-smi -L"}, {"timeout", 30000}}));
  REQUIRE(whole.message.reasoning.opaque_blocks.size() == 1);
  CHECK(whole.message.reasoning.opaque_blocks[0]["signature"].get<std::string>().starts_with("EqQBCkgIBRAB"));
  CHECK(whole.usage == ca::Usage{412 + 1024 + 2048, 187, 2048, 0, std::nullopt});

  const std::string stream = llm_fixture_text("anthropic/stream_thinking_tools.sse");
  const auto reference = assemble_stream<ca::detail::AnthropicStreamAssembler>(stream, stream.size());
  for (const std::size_t piece : {std::size_t{1}, std::size_t{13}, std::size_t{200}}) {
    CAPTURE(piece);
    std::vector<ca::StreamDelta> deltas;
    const auto streamed = assemble_stream<ca::detail::AnthropicStreamAssembler>(stream, piece, &deltas);
    CHECK(streamed.message == reference.message);
    std::string second_input;
    for (const auto& delta : deltas)
      if (delta.tool_call_index == 1u) second_input += delta.tool_call_arguments;
    CHECK(second_input == streamed.message.tool_calls[1].raw_arguments);
  }
  CHECK(reference.message.content == "Reading the reference first.");
  CHECK(reference.message.reasoning.text ==
        "The model is a GEMM followed by ReLU. I should look at the shapes before choosing a tile size.");
  REQUIRE(reference.message.reasoning.opaque_blocks.size() == 1);
  const auto& block = reference.message.reasoning.opaque_blocks[0];
  CHECK(block["type"] == "thinking");
  CHECK(block["thinking"] == reference.message.reasoning.text);
  CHECK(block["signature"] == whole.message.reasoning.opaque_blocks[0]["signature"]);
  REQUIRE(reference.message.tool_calls.size() == 2);
  CHECK(reference.message.tool_calls[0].id == "toolu_01T1x2y3z4a5b6c7d8e9f0g1");
  CHECK(reference.message.tool_calls[1].arguments ==
        nlohmann::json({{"pattern", "def forward"}, {"path", "."}, {"output_mode", "content"}}));
  CHECK(reference.finish_reason == ca::FinishReason::tool_calls);
  CHECK(reference.usage == ca::Usage{412 + 3072, 213, 3072, 0, std::nullopt});

  // Sent back, the streamed thinking block is exactly what arrived.
  ca::ChatRequest next;
  next.messages = {ca::Message::user("go"), reference.message};
  const auto body = ca::detail::anthropic_request_body(next, {"m", false, 1024, std::nullopt});
  CHECK(body["messages"][1]["content"][0] == block);
}

TEST_CASE("Anthropic stream: errors and cuts", "[llm][anthropic]") {
  {
    const auto failure = ca::testing::error_of<ca::detail::LlmFailure>([&] {
      (void)assemble_stream<ca::detail::AnthropicStreamAssembler>(
          llm_fixture_text("anthropic/stream_overloaded_error.sse"), 5);
    });
    CHECK(failure.kind() == ca::LlmErrorKind::retriable);
    CHECK_CONTAINS(failure.what(), "overloaded_error");
  }
  const std::string stream = llm_fixture_text("anthropic/stream_thinking_tools.sse");
  const auto cut_at = stream.find("event: message_delta");
  CHECK_THROWS_AS(assemble_stream<ca::detail::AnthropicStreamAssembler>(stream.substr(0, cut_at), 64),
                  ca::detail::LlmFailure);
  // Malformed partial JSON in a tool block: the call carries the error.
  const auto bad = assemble_stream<ca::detail::AnthropicStreamAssembler>(
      "data: "
      "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":"
      "\"Bash\",\"input\":{}}}\n\n"
      "data: "
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{"
      "\\\"command\\\": \"}}\n\n"
      "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":5}}\n\n",
      16);
  REQUIRE(bad.message.tool_calls.size() == 1);
  CHECK(bad.message.tool_calls[0].argument_error);
  CHECK(bad.message.tool_calls[0].raw_arguments == "{\"command\": ");
}

// --- transport policy -------------------------------------------------------------------------

TEST_CASE("Errors are classified per dialect into what the loop does next", "[llm][policy]") {
  using Kind = ca::LlmErrorKind;
  CHECK(classify(429, "openai/error_insufficient_quota.json").kind() == Kind::fatal);
  CHECK_FALSE(classify(429, "openai/error_insufficient_quota.json").retry());
  CHECK(classify(429, "openai/error_rate_limit.json").kind() == Kind::retriable);
  const auto auth = classify(401, "openai/error_invalid_api_key.json", {{"x-request-id", "req_9"}});
  CHECK(auth.kind() == Kind::fatal);
  CHECK_CONTAINS(auth.what(), "invalid_api_key");
  CHECK_CONTAINS(auth.what(), "request id req_9");
  CHECK_CONTAINS(auth.what(), "check $KEY");
  CHECK(classify(400, "openai/error_context_length.json").kind() == Kind::context_overflow);
  CHECK(classify(500, "openai/error_server.json").kind() == Kind::retriable);
  CHECK(classify(400, "vllm/error_context_length.json").kind() == Kind::context_overflow);
  CHECK(classify(400, "sglang/error_context_length.json").kind() == Kind::context_overflow);
  CHECK(classify(400, "llama_server/error_exceed_context.json").kind() == Kind::context_overflow);
  CHECK(classify(400, "anthropic/error_prompt_too_long.json").kind() == Kind::context_overflow);
  CHECK(classify(529, "anthropic/error_overloaded.json").kind() == Kind::retriable);
  CHECK(classify(429, "anthropic/error_rate_limit.json").kind() == Kind::retriable);
  CHECK(classify(429, "anthropic/error_spend_limit.json").kind() == Kind::fatal);
  CHECK(classify(401, "anthropic/error_authentication.json").kind() == Kind::fatal);

  const ca::detail::HttpHeaders none;
  CHECK(ca::detail::classify_http_error(404, none, R"({"error":{"message":"model not found"}})", "t").kind() ==
        Kind::invalid_request);
  CHECK(ca::detail::classify_http_error(413, none, "request_too_large", "t").kind() == Kind::context_overflow);
  CHECK(ca::detail::classify_http_error(402, none, "", "t").kind() == Kind::fatal);
  CHECK(ca::detail::classify_http_error(408, none, "", "t").retry());
  CHECK(ca::detail::classify_http_error(409, none, "", "t").retry());
  CHECK(ca::detail::classify_http_error(502, none, "<html>Bad gateway</html>", "t").retry());
  // llama-server's overflow is recognised by type even when its message changes.
  CHECK(
      ca::detail::classify_http_error(400, none, R"({"error":{"type":"exceed_context_size_error","message":"?"}})", "t")
          .kind() == Kind::context_overflow);
  CHECK_FALSE(ca::detail::classify_http_error(400, none, R"({"error":{"message":"bad tool schema"}})", "t").retry());
  // x-should-retry decides for errors that retrying can help, not for fatal ones.
  CHECK_FALSE(ca::detail::classify_http_error(503, {{"x-should-retry", "false"}}, "", "t").retry());
  CHECK(ca::detail::classify_http_error(400, {{"x-should-retry", "true"}}, "", "t").retry());
  CHECK_FALSE(ca::detail::classify_http_error(401, {{"x-should-retry", "true"}}, "", "t").retry());
}

TEST_CASE("retry-after in milliseconds, seconds or as a date", "[llm][policy]") {
  using std::chrono::milliseconds;
  const auto now =
      std::chrono::sys_days{std::chrono::year{2015} / 10 / 21} + std::chrono::hours{7} + std::chrono::minutes{28};
  CHECK(ca::detail::retry_after({{"retry-after-ms", "1500.7"}, {"retry-after", "9"}}, now) == milliseconds(1500));
  CHECK(ca::detail::retry_after({{"retry-after", "2"}}, now) == milliseconds(2000));
  CHECK(ca::detail::retry_after({{"retry-after", "0.25"}}, now) == milliseconds(250));
  CHECK(ca::detail::retry_after({{"retry-after", "Wed, 21 Oct 2015 07:28:05 GMT"}}, now) == milliseconds(5000));
  CHECK_FALSE(ca::detail::retry_after({{"retry-after", "soon"}}, now));
  CHECK_FALSE(ca::detail::retry_after({{"retry-after", "Wed, 32 Oct 2015 07:28:05 GMT"}}, now));
  CHECK_FALSE(ca::detail::retry_after({}, now));

  ca::RetryPolicy policy;
  const ca::detail::LlmFailure asked(ca::LlmErrorKind::retriable, "x", 429, milliseconds(3000));
  CHECK(ca::detail::retry_delay(policy, asked, 0, 0.5) == std::pair{milliseconds(3000), true});
  const ca::detail::LlmFailure too_long(ca::LlmErrorKind::retriable, "x", 429, milliseconds(120'000));
  CHECK(ca::detail::retry_delay(policy, too_long, 0, 0.0) == std::pair{milliseconds(500), false});
  const ca::detail::LlmFailure negative(ca::LlmErrorKind::retriable, "x", 429, milliseconds(-5));
  CHECK_FALSE(ca::detail::retry_delay(policy, negative, 0, 0.0).second);
}

TEST_CASE("Backoff doubles up to its cap, with jitter in [1 - jitter, 1]", "[llm][policy]") {
  ca::RetryPolicy policy;  // 500 ms doubling to 8 s, jitter 0.25
  CHECK(ca::detail::backoff_delay(policy, 0, 0.0) == 500ms);
  CHECK(ca::detail::backoff_delay(policy, 1, 0.0) == 1000ms);
  CHECK(ca::detail::backoff_delay(policy, 3, 0.0) == 4000ms);
  CHECK(ca::detail::backoff_delay(policy, 4, 0.0) == 8000ms);
  CHECK(ca::detail::backoff_delay(policy, 40, 0.0) == 8000ms);
  CHECK(ca::detail::backoff_delay(policy, 2, 1.0) == 1500ms);
  CHECK(ca::detail::backoff_delay(policy, 2, 0.5) == 1750ms);
  policy.jitter = 7.0;  // clamped to 1
  CHECK(ca::detail::backoff_delay(policy, 0, 1.0) == 0ms);
}

TEST_CASE("The retry loop retries what it may, counts attempts, and stops when asked", "[llm][policy]") {
  ca::TransportOptions options;
  options.retry.initial_backoff = 1ms;
  options.retry.max_retries = 3;
  std::vector<ca::RetryNotice> notices;
  options.on_retry = [&](const ca::RetryNotice& notice) { notices.push_back(notice); };

  int calls = 0;
  const int result = ca::detail::with_retries(options, {}, [&](int attempt) {
    CHECK(attempt == calls);
    if (++calls < 3) throw ca::detail::LlmFailure(ca::LlmErrorKind::retriable, "HTTP 503", 503);
    return 42;
  });
  CHECK(result == 42);
  REQUIRE(notices.size() == 2);
  CHECK(notices[0].attempt == 1);
  CHECK(notices[1].http_status == 503);
  CHECK_FALSE(notices[0].server_requested);

  calls = 0;
  {
    const auto error = ca::testing::error_of<ca::LlmError>([&] {
      (void)ca::detail::with_retries(options, {}, [&](int) -> int {
        ++calls;
        throw ca::detail::LlmFailure(ca::LlmErrorKind::retriable, "reset", 0);
      });
    });
    CHECK(calls == 4);
    CHECK(error.attempts() == 4);
    CHECK(error.kind() == ca::LlmErrorKind::retriable);
    CHECK_CONTAINS(error.what(), "gave up after 4 attempts");
  }

  calls = 0;
  const auto fatal = ca::testing::error_of<ca::LlmError>([&] {
    (void)ca::detail::with_retries(options, {}, [&](int) -> int {
      ++calls;
      throw ca::detail::LlmFailure(ca::LlmErrorKind::fatal, "quota", 429);
    });
  });
  CHECK(calls == 1);
  CHECK(fatal.kind() == ca::LlmErrorKind::fatal);
  CHECK(fatal.http_status() == 429);

  // A stop request ends a long wait at once.
  std::stop_source stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  const auto cancelled = ca::testing::error_of<ca::LlmError>([&] {
    (void)ca::detail::with_retries(options, stop.get_token(), [&](int) -> int {
      throw ca::detail::LlmFailure(ca::LlmErrorKind::retriable, "busy", 429, std::chrono::milliseconds(30'000));
    });
  });
  CHECK(cancelled.kind() == ca::LlmErrorKind::cancelled);
  stopper.join();
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}
