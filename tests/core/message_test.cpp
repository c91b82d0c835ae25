// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/message.hpp>

namespace ca = cuda_agent;

TEST_CASE("tool calls keep raw arguments and record parse failures", "[message]") {
  const auto good = ca::ToolCall::from_raw("call_1", "Read", R"({"file_path": "/w/a.cu"})");
  CHECK_FALSE(good.argument_error);
  CHECK(good.arguments["file_path"] == "/w/a.cu");
  CHECK(good.raw_arguments == R"({"file_path": "/w/a.cu"})");

  const auto empty = ca::ToolCall::from_raw("call_2", "Glob", "  ");
  CHECK_FALSE(empty.argument_error);
  CHECK(empty.arguments == nlohmann::json::object());

  const auto truncated = ca::ToolCall::from_raw("call_3", "Bash", R"({"command": "ls)");
  REQUIRE(truncated.argument_error);
  CHECK(truncated.argument_error->find("not valid JSON") != std::string::npos);
  CHECK(truncated.arguments == nlohmann::json::object());

  const auto array = ca::ToolCall::from_raw("call_4", "Bash", "[1, 2]");
  REQUIRE(array.argument_error);
  CHECK(*array.argument_error == "tool arguments must be a JSON object, got array");

  const auto object = ca::ToolCall::from_object("toolu_1", "Edit", {{"old_string", "a"}});
  CHECK_FALSE(object.argument_error);
  CHECK(object.raw_arguments == R"({"old_string":"a"})");
  CHECK(ca::ToolCall::from_object("x", "y", "text").argument_error);
}

TEST_CASE("messages round-trip through the OpenAI-shaped JSON form", "[message]") {
  auto assistant = ca::Message::assistant("", {ca::ToolCall::from_raw("c1", "Bash", R"({"command":"nvcc"})"),
                                               ca::ToolCall::from_raw("c2", "Read", "{bad")});
  assistant.reasoning.text = "compile first";
  assistant.reasoning.opaque_blocks.push_back({{"type", "thinking"}, {"thinking", "t"}, {"signature", "sig"}});

  const nlohmann::json json = assistant;
  CHECK(json["role"] == "assistant");
  CHECK(json["content"].is_null());
  CHECK(json["tool_calls"][0]["type"] == "function");
  CHECK(json["tool_calls"][0]["function"]["arguments"] == R"({"command":"nvcc"})");
  CHECK(json["reasoning_content"] == "compile first");

  const auto back = json.get<ca::Message>();
  CHECK(back == assistant);
  REQUIRE(back.tool_calls[1].argument_error);

  const auto tool = ca::Message::tool_result("c1", "Bash", "nvcc: error", true);
  const nlohmann::json tool_json = tool;
  CHECK(tool_json["tool_call_id"] == "c1");
  CHECK(tool_json["is_error"] == true);
  CHECK(tool_json.get<ca::Message>() == tool);

  const auto system = ca::Message::system("You are a CUDA engineer.");
  CHECK(nlohmann::json(system).get<ca::Message>() == system);
}

TEST_CASE("messages from other producers are read leniently", "[message]") {
  const auto parts = nlohmann::json::parse(
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]})");
  CHECK(parts.get<ca::Message>().content == "ab");

  const auto developer = nlohmann::json::parse(R"({"role":"developer","content":"rules"})");
  CHECK(developer.get<ca::Message>().role == ca::Role::system);

  const auto vllm = nlohmann::json::parse(R"({"role":"assistant","content":"x","reasoning":"because"})");
  CHECK(vllm.get<ca::Message>().reasoning.text == "because");

  const auto object_arguments = nlohmann::json::parse(
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"1","function":{"name":"Bash","arguments":{"command":"ls"}}}]})");
  const auto message = object_arguments.get<ca::Message>();
  CHECK(message.tool_calls[0].arguments["command"] == "ls");

  CHECK_THROWS_AS(nlohmann::json::parse(R"({"role":"robot","content":""})").get<ca::Message>(),
                  nlohmann::json::exception);
}

TEST_CASE("finish reasons are normalized across backends", "[message]") {
  CHECK(ca::parse_finish_reason("stop") == ca::FinishReason::stop);
  CHECK(ca::parse_finish_reason("end_turn") == ca::FinishReason::stop);
  CHECK(ca::parse_finish_reason("tool_use") == ca::FinishReason::tool_calls);
  CHECK(ca::parse_finish_reason("tool_calls") == ca::FinishReason::tool_calls);
  CHECK(ca::parse_finish_reason("max_tokens") == ca::FinishReason::length);
  CHECK(ca::parse_finish_reason("refusal") == ca::FinishReason::content_filter);
  CHECK(ca::parse_finish_reason("pause_turn") == ca::FinishReason::unknown);
  CHECK(ca::to_string(ca::FinishReason::tool_calls) == "tool_calls");
}

TEST_CASE("usage accumulates, cost only where reported", "[message]") {
  ca::Usage total;
  total += ca::Usage{100, 20, 50, 5, std::nullopt};
  CHECK_FALSE(total.cost_usd);
  total += ca::Usage{10, 2, 0, 0, 0.25};
  CHECK(total.prompt_tokens == 110);
  CHECK(total.total_tokens() == 132);
  CHECK(total.cost_usd == 0.25);
  const nlohmann::json json = total;
  CHECK(json["total_tokens"] == 132);
  CHECK(json.get<ca::Usage>() == total);
}

TEST_CASE("LLM errors carry the kind the loop acts on", "[message]") {
  const ca::LlmError error(ca::LlmErrorKind::context_overflow, "prompt is too long", 400, 1);
  CHECK(error.kind() == ca::LlmErrorKind::context_overflow);
  CHECK(error.http_status() == 400);
  CHECK(ca::to_string(error.kind()) == "context_overflow");
  CHECK(std::string(error.what()) == "prompt is too long");
}
