// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Anthropic Messages wire format (`POST /v1/messages`): request bodies with
/// `tool_use` / `tool_result` blocks and thinking blocks sent back unchanged, whole
/// responses, and the assembly of streamed events. No I/O happens here.

#include <cstddef>      // size_t
#include <functional>   // function
#include <map>          // map
#include <optional>     // optional
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/llm/detail/llm_failure.hpp"
#include "cuda_agent/llm/detail/sse_parser.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent::detail {

inline constexpr std::string_view anthropic_api_version = "2023-06-01";

struct AnthropicWireSettings {
  std::string model;
  bool stream = true;
  /// `max_tokens` is required by the API; used when the request sets none.
  int default_max_tokens = 8192;
  /// Extended thinking with this budget; unset: off.
  std::optional<int> thinking_budget_tokens;
};

// --- requests --------------------------------------------------------------------------------

/// The `messages` and `system` of a request. System messages, wherever they stand, go
/// to the top-level `system` in order. Tool results become `tool_result` blocks of a
/// user turn; consecutive turns of one role are merged, so that the results of parallel
/// calls share one user turn and come first in it, as the API requires. Empty turns are
/// dropped (the API rejects empty content).
struct AnthropicConversation {
  nlohmann::json messages = nlohmann::json::array();
  std::string system;
};

[[nodiscard]] inline AnthropicConversation anthropic_conversation(const std::vector<Message>& history) {
  AnthropicConversation out;
  const auto append = [&](std::string_view role, nlohmann::json blocks) {
    if (blocks.empty()) return;
    if (!out.messages.empty() && out.messages.back()["role"] == std::string(role)) {
      for (auto& block : blocks) out.messages.back()["content"].push_back(std::move(block));
      return;
    }
    out.messages.push_back({{"role", role}, {"content", std::move(blocks)}});
  };
  for (const Message& message : history) {
    nlohmann::json blocks = nlohmann::json::array();
    switch (message.role) {
      case Role::system:
        if (!message.content.empty()) out.system += (out.system.empty() ? "" : "\n\n") + message.content;
        break;
      case Role::user:
        if (!message.content.empty()) blocks.push_back({{"type", "text"}, {"text", message.content}});
        append("user", std::move(blocks));
        break;
      case Role::assistant:
        // Thinking blocks go back exactly as received, signatures included, ahead of the
        // text and the calls they led to. Reasoning text without blocks (from another
        // backend) cannot be signed and is not sent.
        for (const auto& block : message.reasoning.opaque_blocks) blocks.push_back(block);
        if (!message.content.empty()) blocks.push_back({{"type", "text"}, {"text", message.content}});
        for (const ToolCall& call : message.tool_calls)
          blocks.push_back({{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", call.arguments}});
        append("assistant", std::move(blocks));
        break;
      case Role::tool: {
        nlohmann::json result = {{"type", "tool_result"}, {"tool_use_id", message.tool_call_id}};
        if (!message.content.empty()) result["content"] = message.content;
        if (message.is_error) result["is_error"] = true;
        blocks.push_back(std::move(result));
        append("user", std::move(blocks));
        break;
      }
    }
  }
  return out;
}

[[nodiscard]] inline nlohmann::json anthropic_request_body(const ChatRequest& request,
                                                           const AnthropicWireSettings& settings) {
  AnthropicConversation conversation = anthropic_conversation(request.messages);
  nlohmann::json body = {{"model", settings.model},
                         {"max_tokens", request.max_tokens.value_or(settings.default_max_tokens)},
                         {"messages", std::move(conversation.messages)}};
  if (!conversation.system.empty()) body["system"] = std::move(conversation.system);
  if (!request.tools.empty()) {
    nlohmann::json tools = nlohmann::json::array();
    for (const ToolSpec& tool : request.tools) {
      nlohmann::json entry = {{"name", tool.name}, {"input_schema", tool.parameters}};
      if (!tool.description.empty()) entry["description"] = tool.description;
      tools.push_back(std::move(entry));
    }
    body["tools"] = std::move(tools);
    nlohmann::json choice;
    switch (request.tool_choice.mode) {
      case ToolChoice::Mode::automatic:
        choice = {{"type", "auto"}};
        break;
      case ToolChoice::Mode::none:
        choice = {{"type", "none"}};
        break;
      case ToolChoice::Mode::required:
        choice = {{"type", "any"}};
        break;
      case ToolChoice::Mode::named:
        choice = {{"type", "tool"}, {"name", request.tool_choice.name}};
        break;
    }
    if (request.parallel_tool_calls == false && request.tool_choice.mode != ToolChoice::Mode::none)
      choice["disable_parallel_tool_use"] = true;
    // The default (auto, parallel allowed) is left implicit.
    if (choice.size() > 1 || choice["type"] != "auto") body["tool_choice"] = std::move(choice);
  }
  if (settings.thinking_budget_tokens)
    body["thinking"] = {{"type", "enabled"}, {"budget_tokens", *settings.thinking_budget_tokens}};
  if (!request.stop_sequences.empty()) body["stop_sequences"] = request.stop_sequences;
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.top_p) body["top_p"] = *request.top_p;
  // Messages has no seed: `request.seed` cannot be honoured and is not sent.
  if (settings.stream) body["stream"] = true;
  if (request.extra_body.is_object())
    for (const auto& [key, value] : request.extra_body.items()) {
      if (value.is_null())
        body.erase(key);
      else
        body[key] = value;
    }
  return body;
}

// --- responses -------------------------------------------------------------------------------

/// Anthropic counts cached prompt tokens apart from `input_tokens`; the normalized
/// `prompt_tokens` includes them, as OpenAI's does. Fields absent from `usage` leave
/// `into` unchanged (streamed usage arrives in parts).
inline void anthropic_usage(const nlohmann::json& usage, Usage& into, std::int64_t& input,
                            std::int64_t& cache_creation) {
  if (!usage.is_object()) return;
  input = integer_field(usage, "input_tokens", input);
  cache_creation = integer_field(usage, "cache_creation_input_tokens", cache_creation);
  into.cached_tokens = integer_field(usage, "cache_read_input_tokens", into.cached_tokens);
  into.completion_tokens = integer_field(usage, "output_tokens", into.completion_tokens);
  into.prompt_tokens = input + cache_creation + into.cached_tokens;
}

/// Adds one finished content block to `message`.
inline void add_anthropic_block(const nlohmann::json& block, Message& message) {
  const std::string type = string_field(block, "type");
  if (type == "text") {
    message.content += string_field(block, "text");
  } else if (type == "thinking") {
    message.reasoning.text += string_field(block, "thinking");
    message.reasoning.opaque_blocks.push_back(block);
  } else if (type == "redacted_thinking") {
    message.reasoning.opaque_blocks.push_back(block);
  } else if (type == "tool_use") {
    const auto input = block.find("input");
    message.tool_calls.push_back(ToolCall::from_object(string_field(block, "id"), string_field(block, "name"),
                                                       input == block.end() ? nlohmann::json::object() : *input));
  }
  // Server-side tool blocks (web search and the like) are the API's business.
}

[[nodiscard]] inline ChatResponse parse_anthropic_response(const nlohmann::json& body, std::string_view origin) {
  if (!body.is_object())
    throw LlmFailure(LlmErrorKind::invalid_response, std::string(origin) + ": the response is not a JSON object");
  if (string_field(body, "type") == "error" || (body.contains("error") && !body["error"].is_null()))
    throw classify_error_event(body, origin);
  const auto content = body.find("content");
  if (content == body.end() || !content->is_array())
    throw LlmFailure(LlmErrorKind::invalid_response, std::string(origin) + ": the response has no content list");
  ChatResponse response;
  response.id = string_field(body, "id");
  response.model = string_field(body, "model");
  response.message = Message::assistant({});
  for (const auto& block : *content) add_anthropic_block(block, response.message);
  response.finish_reason = parse_finish_reason(string_field(body, "stop_reason"));
  std::int64_t input = 0, cache_creation = 0;
  if (const auto usage = body.find("usage"); usage != body.end())
    anthropic_usage(*usage, response.usage, input, cache_creation);
  return response;
}

// --- streaming -------------------------------------------------------------------------------

/// Builds a `ChatResponse` from a Messages event stream: `message_start`, then per
/// content block `content_block_start`, `content_block_delta` (`text_delta`,
/// `thinking_delta`, `signature_delta`, `input_json_delta`) and `content_block_stop`,
/// then `message_delta` (stop reason, output tokens) and `message_stop`; `ping` at any
/// time. `error` events are thrown as the failure they describe.
///
/// Complete once `message_stop` or a stop reason arrived; earlier, `finish()` throws a
/// retriable `LlmFailure`. Tool input arrives as pieces of JSON text (`partial_json`),
/// concatenated per block and parsed at the end, so malformed input becomes the call's
/// `argument_error`.
class AnthropicStreamAssembler {
 public:
  AnthropicStreamAssembler(std::string origin, std::function<void(const StreamDelta&)> on_delta = {})
      : origin_(std::move(origin)), on_delta_(std::move(on_delta)) {}

  void on_event(const SseEvent& event) {
    ++events_;
    const auto data = nlohmann::json::parse(event.data, nullptr, false);
    if (data.is_discarded() || !data.is_object())
      throw LlmFailure(LlmErrorKind::invalid_response,
                       origin_ + ": a streamed event is not a JSON object: " + event.data.substr(0, 200));
    std::string type = string_field(data, "type");
    if (type.empty()) type = event.event;
    if (type == "error") throw classify_error_event(data, origin_);
    if (type == "message_start") {
      const auto message = data.find("message");
      if (message == data.end() || !message->is_object()) return;
      response_.id = string_field(*message, "id");
      response_.model = string_field(*message, "model");
      if (const auto usage = message->find("usage"); usage != message->end())
        anthropic_usage(*usage, response_.usage, input_tokens_, cache_creation_tokens_);
    } else if (type == "content_block_start") {
      start_block(data);
    } else if (type == "content_block_delta") {
      add_delta(data);
    } else if (type == "message_delta") {
      if (const auto delta = data.find("delta"); delta != data.end() && delta->is_object())
        if (const auto reason = delta->find("stop_reason"); reason != delta->end() && reason->is_string())
          stop_reason_ = parse_finish_reason(reason->get<std::string>());
      if (const auto usage = data.find("usage"); usage != data.end())
        anthropic_usage(*usage, response_.usage, input_tokens_, cache_creation_tokens_);
    } else if (type == "message_stop") {
      stopped_ = true;
    }
    // ping, content_block_stop and future event types carry nothing to assemble.
  }

  [[nodiscard]] bool complete() const noexcept { return stopped_ || stop_reason_.has_value(); }

  [[nodiscard]] ChatResponse finish() {
    if (!complete())
      throw LlmFailure(LlmErrorKind::retriable,
                       origin_ + ": the stream ended before the answer was complete (no message_stop after " +
                           std::to_string(events_) + " events)");
    response_.message = Message::assistant({});
    for (auto& [index, block] : blocks_) {
      if (block.type == "tool_use") {
        // Input arrives as text pieces; a block without any keeps its start's object.
        const std::string id = string_field(block.start, "id"), name = string_field(block.start, "name");
        if (block.partial_json.empty()) {
          const auto input = block.start.find("input");
          response_.message.tool_calls.push_back(
              ToolCall::from_object(id, name, input == block.start.end() ? nlohmann::json::object() : *input));
        } else {
          response_.message.tool_calls.push_back(ToolCall::from_raw(id, name, block.partial_json));
        }
        continue;
      }
      nlohmann::json whole = block.start;
      if (block.type == "text") whole["text"] = string_field(whole, "text") + block.text;
      if (block.type == "thinking") {
        whole["thinking"] = string_field(whole, "thinking") + block.text;
        whole["signature"] = string_field(whole, "signature") + block.signature;
      }
      add_anthropic_block(whole, response_.message);
    }
    response_.finish_reason = stop_reason_.value_or(FinishReason::unknown);
    return std::move(response_);
  }

 private:
  struct Block {
    std::string type;
    nlohmann::json start;
    std::string text;  // text or thinking
    std::string signature;
    std::string partial_json;
    std::size_t tool_position = 0;
  };

  void start_block(const nlohmann::json& data) {
    const auto block = data.find("content_block");
    if (block == data.end() || !block->is_object()) return;
    Block& entry = blocks_[integer_field(data, "index")];
    entry.type = string_field(*block, "type");
    entry.start = *block;
    if (entry.type == "tool_use") {
      entry.tool_position = tool_count_++;
      StreamDelta delta;
      delta.tool_call_index = entry.tool_position;
      delta.tool_call_name = string_field(*block, "name");
      emit(delta);
    }
  }

  void add_delta(const nlohmann::json& data) {
    const auto delta = data.find("delta");
    if (delta == data.end() || !delta->is_object()) return;
    const auto found = blocks_.find(integer_field(data, "index"));
    if (found == blocks_.end()) return;  // a delta for a block that never started
    Block& block = found->second;
    const std::string type = string_field(*delta, "type");
    StreamDelta increment;
    if (type == "text_delta") {
      increment.content = string_field(*delta, "text");
      block.text += increment.content;
    } else if (type == "thinking_delta") {
      increment.reasoning = string_field(*delta, "thinking");
      block.text += increment.reasoning;
    } else if (type == "signature_delta") {
      block.signature += string_field(*delta, "signature");
      return;
    } else if (type == "input_json_delta") {
      increment.tool_call_index = block.tool_position;
      increment.tool_call_arguments = string_field(*delta, "partial_json");
      block.partial_json += increment.tool_call_arguments;
    } else {
      return;
    }
    emit(increment);
  }

  void emit(const StreamDelta& delta) {
    if (on_delta_) on_delta_(delta);
  }

  std::string origin_;
  std::function<void(const StreamDelta&)> on_delta_;
  ChatResponse response_;
  std::map<std::int64_t, Block> blocks_;
  std::size_t tool_count_ = 0;
  std::int64_t input_tokens_ = 0;
  std::int64_t cache_creation_tokens_ = 0;
  std::optional<FinishReason> stop_reason_;
  std::size_t events_ = 0;
  bool stopped_ = false;
};

}  // namespace cuda_agent::detail
