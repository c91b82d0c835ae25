// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The conversation vocabulary shared by LLM clients, tools, the agent loop and
/// trajectories: messages, tool calls and their results, tool specifications, usage,
/// one finish-reason enum, chat requests and responses, and LLM errors.
///
/// Every backend is normalized into these types. The JSON form (to_json/from_json) is the
/// OpenAI chat-message shape, which trainers read, plus a few fields that keep what other
/// backends need to round-trip (tool error flags, opaque reasoning blocks).

#include <chrono>       // milliseconds
#include <cstdint>      // int64_t
#include <functional>   // function
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <stop_token>   // stop_token
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

namespace cuda_agent {

enum class Role { system, user, assistant, tool };

[[nodiscard]] constexpr std::string_view to_string(Role role) noexcept {
  switch (role) {
    case Role::system:
      return "system";
    case Role::user:
      return "user";
    case Role::assistant:
      return "assistant";
    case Role::tool:
      return "tool";
  }
  return "user";
}

[[nodiscard]] inline std::optional<Role> parse_role(std::string_view text) noexcept {
  if (text == "system" || text == "developer") return Role::system;
  if (text == "user") return Role::user;
  if (text == "assistant") return Role::assistant;
  if (text == "tool") return Role::tool;
  return std::nullopt;
}

/// One call the model asked for.
struct ToolCall {
  std::string id;
  std::string name;
  /// The arguments as parsed JSON; an empty object when they could not be parsed.
  nlohmann::json arguments = nlohmann::json::object();
  /// The arguments exactly as the backend sent them.
  std::string raw_arguments;
  /// Set when `raw_arguments` is not a JSON object; the loop answers the call with this
  /// text as a tool error instead of running it.
  std::optional<std::string> argument_error;

  /// Builds a call from the raw argument text, recording a parse failure rather than
  /// throwing: malformed arguments are the model's mistake, to be reported back to it.
  [[nodiscard]] static ToolCall from_raw(std::string id, std::string name, std::string raw) {
    ToolCall call{std::move(id), std::move(name), nlohmann::json::object(), std::move(raw), std::nullopt};
    const std::string_view text = call.raw_arguments;
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return call;  // "" means {}
    try {
      auto parsed = nlohmann::json::parse(text);
      if (parsed.is_object())
        call.arguments = std::move(parsed);
      else
        call.argument_error = "tool arguments must be a JSON object, got " + std::string(parsed.type_name());
    } catch (const nlohmann::json::parse_error& error) {
      call.argument_error = std::string("tool arguments are not valid JSON: ") + error.what();
    }
    return call;
  }

  /// Builds a call from arguments a backend delivered as an object (Anthropic, Ollama).
  [[nodiscard]] static ToolCall from_object(std::string id, std::string name, nlohmann::json arguments) {
    ToolCall call{std::move(id), std::move(name), nlohmann::json::object(), {}, std::nullopt};
    if (arguments.is_object())
      call.arguments = std::move(arguments);
    else if (!arguments.is_null())
      call.argument_error = "tool arguments must be a JSON object";
    call.raw_arguments = call.arguments.dump();
    return call;
  }

  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

/// Reasoning a model emitted alongside its answer.
struct Reasoning {
  /// Readable text (`reasoning`, `reasoning_content`, or Anthropic `thinking`).
  std::string text;
  /// Provider blocks that must be sent back unchanged on the next turn (Anthropic
  /// `thinking` blocks with their signatures, `redacted_thinking`).
  std::vector<nlohmann::json> opaque_blocks;

  [[nodiscard]] bool empty() const noexcept { return text.empty() && opaque_blocks.empty(); }
  friend bool operator==(const Reasoning&, const Reasoning&) = default;
};

/// One message of a conversation.
struct Message {
  Role role = Role::user;
  std::string content;
  /// Assistant messages: the calls requested, in the order the model gave them.
  std::vector<ToolCall> tool_calls;
  /// Tool messages: which call this answers, and the tool's name.
  std::string tool_call_id;
  std::string name;
  /// Tool messages: the tool failed; the content says why.
  bool is_error = false;
  /// Assistant messages.
  Reasoning reasoning;

  [[nodiscard]] static Message system(std::string text) { return with_text(Role::system, std::move(text)); }
  [[nodiscard]] static Message user(std::string text) { return with_text(Role::user, std::move(text)); }
  [[nodiscard]] static Message assistant(std::string text, std::vector<ToolCall> calls = {}) {
    Message message = with_text(Role::assistant, std::move(text));
    message.tool_calls = std::move(calls);
    return message;
  }
  [[nodiscard]] static Message tool_result(std::string call_id, std::string tool_name, std::string text,
                                           bool is_error = false) {
    Message message = with_text(Role::tool, std::move(text));
    message.tool_call_id = std::move(call_id);
    message.name = std::move(tool_name);
    message.is_error = is_error;
    return message;
  }

  friend bool operator==(const Message&, const Message&) = default;

 private:
  static Message with_text(Role role, std::string text) {
    Message message;
    message.role = role;
    message.content = std::move(text);
    return message;
  }
};

/// Token accounting for one call or a whole episode.
struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  /// Prompt tokens served from the provider's cache.
  std::int64_t cached_tokens = 0;
  /// Completion tokens spent on hidden or visible reasoning.
  std::int64_t reasoning_tokens = 0;
  /// Cost in US dollars, where the backend reports it.
  std::optional<double> cost_usd;

  [[nodiscard]] std::int64_t total_tokens() const noexcept { return prompt_tokens + completion_tokens; }

  Usage& operator+=(const Usage& other) noexcept {
    prompt_tokens += other.prompt_tokens;
    completion_tokens += other.completion_tokens;
    cached_tokens += other.cached_tokens;
    reasoning_tokens += other.reasoning_tokens;
    if (other.cost_usd) cost_usd = cost_usd.value_or(0.0) + *other.cost_usd;
    return *this;
  }
  friend bool operator==(const Usage&, const Usage&) = default;
};

/// Why the model stopped, normalized across backends.
enum class FinishReason {
  stop,            ///< finished its answer (OpenAI stop, Anthropic end_turn/stop_sequence)
  tool_calls,      ///< wants tools run (tool_calls, tool_use)
  length,          ///< hit max_tokens or the context window mid-answer
  content_filter,  ///< withheld by a filter or refused
  unknown,         ///< the backend gave none, or one not listed here
};

[[nodiscard]] constexpr std::string_view to_string(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::tool_calls:
      return "tool_calls";
    case FinishReason::length:
      return "length";
    case FinishReason::content_filter:
      return "content_filter";
    case FinishReason::unknown:
      return "unknown";
  }
  return "unknown";
}

[[nodiscard]] inline FinishReason parse_finish_reason(std::string_view text) noexcept {
  if (text == "stop" || text == "end_turn" || text == "stop_sequence") return FinishReason::stop;
  if (text == "tool_calls" || text == "tool_use" || text == "function_call") return FinishReason::tool_calls;
  if (text == "length" || text == "max_tokens" || text == "model_context_window_exceeded" || text == "truncated")
    return FinishReason::length;
  if (text == "content_filter" || text == "refusal") return FinishReason::content_filter;
  return FinishReason::unknown;
}

/// A tool as the model sees it.
struct ToolSpec {
  std::string name;
  std::string description;
  /// JSON Schema (draft 2020-12) of the arguments object.
  nlohmann::json parameters = nlohmann::json::object();

  friend bool operator==(const ToolSpec&, const ToolSpec&) = default;
};

/// Whether and which tools the model may call.
struct ToolChoice {
  enum class Mode { automatic, none, required, named };
  Mode mode = Mode::automatic;
  /// The tool to call when `mode` is `named`.
  std::string name;

  [[nodiscard]] static ToolChoice automatic() { return {}; }
  [[nodiscard]] static ToolChoice none() { return {Mode::none, {}}; }
  [[nodiscard]] static ToolChoice required() { return {Mode::required, {}}; }
  [[nodiscard]] static ToolChoice named(std::string tool) { return {Mode::named, std::move(tool)}; }
  friend bool operator==(const ToolChoice&, const ToolChoice&) = default;
};

/// An increment of a streamed answer, for progress display. Clients still return the
/// assembled response; these are only a view of it while it arrives.
struct StreamDelta {
  std::string content;
  std::string reasoning;
  /// A fragment of a tool call's arguments, with the call's position in the message.
  std::optional<std::size_t> tool_call_index;
  std::string tool_call_name;
  std::string tool_call_arguments;
  /// The previous attempt failed mid-stream and the client is asking again: whatever
  /// earlier deltas of this call showed is void, and the answer starts over.
  bool restarted = false;
};

/// One chat turn's input.
struct ChatRequest {
  std::vector<Message> messages;
  std::vector<ToolSpec> tools;
  ToolChoice tool_choice;
  /// Unset: the backend's default (llama-server's is off, OpenAI's is on).
  std::optional<bool> parallel_tool_calls;
  std::optional<int> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<std::int64_t> seed;
  std::vector<std::string> stop_sequences;
  /// Merged into the request body last, for backend-specific fields (top_k,
  /// chat_template_kwargs, reasoning_effort, ...).
  nlohmann::json extra_body = nlohmann::json::object();
  /// Called with each increment when the client streams.
  std::function<void(const StreamDelta&)> on_delta;
  /// A stop request aborts the call; the client then throws LlmError{cancelled}.
  std::stop_token cancellation;
};

/// One chat turn's output.
struct ChatResponse {
  Message message = Message::assistant({});
  FinishReason finish_reason = FinishReason::unknown;
  Usage usage;
  /// The model that answered, as the backend named it.
  std::string model;
  /// The backend's response id, where it gives one.
  std::string id;
};

/// How an LLM call failed, in the terms the loop acts on.
enum class LlmErrorKind {
  retriable,         ///< transient (429, 5xx, 529, resets, stalls); retries ran out
  fatal,             ///< authentication, permission, quota or spend limit: do not retry
  context_overflow,  ///< the prompt is too long: compact the history, then retry once
  invalid_request,   ///< the backend rejected the request (a bug or unsupported option)
  invalid_response,  ///< the backend answered something unusable
  cancelled,         ///< the caller's stop token fired
};

[[nodiscard]] constexpr std::string_view to_string(LlmErrorKind kind) noexcept {
  switch (kind) {
    case LlmErrorKind::retriable:
      return "retriable";
    case LlmErrorKind::fatal:
      return "fatal";
    case LlmErrorKind::context_overflow:
      return "context_overflow";
    case LlmErrorKind::invalid_request:
      return "invalid_request";
    case LlmErrorKind::invalid_response:
      return "invalid_response";
    case LlmErrorKind::cancelled:
      return "cancelled";
  }
  return "fatal";
}

class LlmError : public std::runtime_error {
 public:
  LlmError(LlmErrorKind kind, const std::string& message, int http_status = 0, int attempts = 1)
      : std::runtime_error(message), kind_(kind), http_status_(http_status), attempts_(attempts) {}

  [[nodiscard]] LlmErrorKind kind() const noexcept { return kind_; }
  /// The last HTTP status seen, or 0 for transport failures.
  [[nodiscard]] int http_status() const noexcept { return http_status_; }
  /// How many attempts were made before giving up.
  [[nodiscard]] int attempts() const noexcept { return attempts_; }

 private:
  LlmErrorKind kind_;
  int http_status_;
  int attempts_;
};

// ---------------------------------------------------------------------------------------
// JSON form: OpenAI chat messages, plus `is_error` on tool messages and `reasoning_blocks`
// on assistant messages where they carry something.

inline void to_json(nlohmann::json& out, const ToolCall& call) {
  out = {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.raw_arguments}}}};
}

inline void from_json(const nlohmann::json& in, ToolCall& call) {
  const nlohmann::json& function = in.at("function");
  const nlohmann::json& arguments = function.contains("arguments") ? function.at("arguments") : nlohmann::json();
  std::string id = in.value("id", "");
  std::string name = function.at("name").get<std::string>();
  call = arguments.is_string() ? ToolCall::from_raw(std::move(id), std::move(name), arguments.get<std::string>())
                               : ToolCall::from_object(std::move(id), std::move(name), arguments);
}

inline void to_json(nlohmann::json& out, const Message& message) {
  out = {{"role", to_string(message.role)}};
  if (message.role == Role::assistant && !message.tool_calls.empty()) {
    out["content"] = message.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(message.content);
    out["tool_calls"] = message.tool_calls;
  } else {
    out["content"] = message.content;
  }
  if (message.role == Role::tool) {
    out["tool_call_id"] = message.tool_call_id;
    if (!message.name.empty()) out["name"] = message.name;
    if (message.is_error) out["is_error"] = true;
  }
  if (!message.reasoning.text.empty()) out["reasoning_content"] = message.reasoning.text;
  if (!message.reasoning.opaque_blocks.empty()) out["reasoning_blocks"] = message.reasoning.opaque_blocks;
}

inline void from_json(const nlohmann::json& in, Message& message) {
  const auto role = parse_role(in.at("role").get<std::string>());
  if (!role) throw nlohmann::json::other_error::create(501, "unknown message role " + in.at("role").dump(), &in);
  message = Message{};
  message.role = *role;
  if (const auto content = in.find("content"); content != in.end() && !content->is_null()) {
    if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {  // text parts
      for (const auto& part : *content)
        if (part.value("type", "") == "text") message.content += part.value("text", "");
    }
  }
  if (const auto calls = in.find("tool_calls"); calls != in.end() && calls->is_array())
    message.tool_calls = calls->get<std::vector<ToolCall>>();
  message.tool_call_id = in.value("tool_call_id", "");
  message.name = in.value("name", "");
  message.is_error = in.value("is_error", false);
  for (const char* key : {"reasoning_content", "reasoning"})
    if (const auto text = in.find(key); text != in.end() && text->is_string() && message.reasoning.text.empty())
      message.reasoning.text = text->get<std::string>();
  if (const auto blocks = in.find("reasoning_blocks"); blocks != in.end() && blocks->is_array())
    message.reasoning.opaque_blocks = blocks->get<std::vector<nlohmann::json>>();
}

inline void to_json(nlohmann::json& out, const Usage& usage) {
  out = {{"prompt_tokens", usage.prompt_tokens},
         {"completion_tokens", usage.completion_tokens},
         {"total_tokens", usage.total_tokens()},
         {"cached_tokens", usage.cached_tokens},
         {"reasoning_tokens", usage.reasoning_tokens}};
  if (usage.cost_usd) out["cost_usd"] = *usage.cost_usd;
}

inline void from_json(const nlohmann::json& in, Usage& usage) {
  usage.prompt_tokens = in.value("prompt_tokens", std::int64_t{0});
  usage.completion_tokens = in.value("completion_tokens", std::int64_t{0});
  usage.cached_tokens = in.value("cached_tokens", std::int64_t{0});
  usage.reasoning_tokens = in.value("reasoning_tokens", std::int64_t{0});
  if (const auto cost = in.find("cost_usd"); cost != in.end() && cost->is_number())
    usage.cost_usd = cost->get<double>();
}

inline void to_json(nlohmann::json& out, const ToolSpec& spec) {
  out = {{"name", spec.name}, {"description", spec.description}, {"parameters", spec.parameters}};
}

inline void from_json(const nlohmann::json& in, ToolSpec& spec) {
  spec.name = in.at("name").get<std::string>();
  spec.description = in.value("description", "");
  spec.parameters = in.value("parameters", nlohmann::json::object());
}

}  // namespace cuda_agent
