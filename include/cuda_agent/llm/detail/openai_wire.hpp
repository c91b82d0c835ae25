// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The OpenAI Chat Completions wire format (`POST /v1/chat/completions`) as spoken by
/// OpenAI, vLLM, SGLang, llama-server and Ollama: request bodies, whole responses, and
/// the assembly of streamed chunks, tool-call fragments included. No I/O happens here.

#include <cstddef>      // size_t
#include <functional>   // function
#include <map>          // map
#include <optional>     // optional
#include <random>       // random_device
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/llm/detail/llm_failure.hpp"
#include "cuda_agent/llm/detail/sse_parser.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent::detail {

/// What differs between OpenAI-compatible servers on the request side.
struct OpenAiWireSettings {
  std::string model;
  bool stream = true;
  /// Ask for the final usage chunk (`stream_options.include_usage`).
  bool include_usage = true;
  /// `max_completion_tokens` (OpenAI) or `max_tokens` (open-source servers).
  std::string max_tokens_field = "max_completion_tokens";
  /// Used when the request does not set a limit.
  std::optional<int> default_max_tokens;
  /// Sent when tools are offered and the request leaves `parallel_tool_calls` unset
  /// (llama-server turns parallel calls off unless asked).
  std::optional<bool> default_parallel_tool_calls;
  /// Send malformed arguments back as the model wrote them (OpenAI stores them as text).
  /// Servers that parse the history's arguments (vLLM, SGLang, llama-server templates)
  /// reject the whole request instead, so they get `{}`; the tool result explains.
  bool echo_invalid_arguments = true;
  /// Non-empty: earlier assistant reasoning is sent back under this field (DeepSeek-style
  /// servers that require `reasoning_content` during a tool loop).
  std::string reasoning_echo_field;
};

// --- requests --------------------------------------------------------------------------------

[[nodiscard]] inline nlohmann::json openai_message(const Message& message, const OpenAiWireSettings& settings) {
  nlohmann::json out = {{"role", to_string(message.role)}};
  switch (message.role) {
    case Role::system:
    case Role::user:
      out["content"] = message.content;
      break;
    case Role::assistant:
      if (message.tool_calls.empty()) {
        out["content"] = message.content;
        break;
      }
      out["content"] = message.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(message.content);
      out["tool_calls"] = nlohmann::json::array();
      for (const ToolCall& call : message.tool_calls) {
        std::string arguments = call.raw_arguments;
        if (call.argument_error ? !settings.echo_invalid_arguments : trim_http_whitespace(arguments).empty())
          arguments = call.arguments.dump();
        out["tool_calls"].push_back(
            {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", arguments}}}});
      }
      break;
    case Role::tool:
      // Chat Completions has no error flag: the content says that the tool failed.
      out["tool_call_id"] = message.tool_call_id;
      out["content"] = message.content;
      break;
  }
  if (message.role == Role::assistant && !settings.reasoning_echo_field.empty() && !message.reasoning.text.empty())
    out[settings.reasoning_echo_field] = message.reasoning.text;
  return out;
}

/// The request body for one chat turn.
[[nodiscard]] inline nlohmann::json openai_request_body(const ChatRequest& request,
                                                        const OpenAiWireSettings& settings) {
  nlohmann::json body = {{"model", settings.model}, {"messages", nlohmann::json::array()}};
  for (const Message& message : request.messages) body["messages"].push_back(openai_message(message, settings));

  // Tool settings only mean something with tools; OpenAI rejects them otherwise.
  if (!request.tools.empty()) {
    nlohmann::json tools = nlohmann::json::array();
    for (const ToolSpec& tool : request.tools) {
      nlohmann::json function = {{"name", tool.name}, {"parameters", tool.parameters}};
      if (!tool.description.empty()) function["description"] = tool.description;
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    body["tools"] = std::move(tools);
    switch (request.tool_choice.mode) {
      case ToolChoice::Mode::automatic:
        break;  // the default with tools; vLLM needs a flag for an explicit "auto"
      case ToolChoice::Mode::none:
        body["tool_choice"] = "none";
        break;
      case ToolChoice::Mode::required:
        body["tool_choice"] = "required";
        break;
      case ToolChoice::Mode::named:
        body["tool_choice"] = {{"type", "function"}, {"function", {{"name", request.tool_choice.name}}}};
        break;
    }
    if (const auto parallel =
            request.parallel_tool_calls ? request.parallel_tool_calls : settings.default_parallel_tool_calls)
      body["parallel_tool_calls"] = *parallel;
  }

  if (const auto limit = request.max_tokens ? request.max_tokens : settings.default_max_tokens)
    body[settings.max_tokens_field] = *limit;
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.top_p) body["top_p"] = *request.top_p;
  if (request.seed) body["seed"] = *request.seed;
  if (!request.stop_sequences.empty()) body["stop"] = request.stop_sequences;
  if (settings.stream) {
    body["stream"] = true;
    if (settings.include_usage) body["stream_options"] = {{"include_usage", true}};
  }
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

/// Reads `usage`, including the details OpenAI nests and the fields other servers use.
[[nodiscard]] inline Usage openai_usage(const nlohmann::json& usage) {
  Usage out;
  if (!usage.is_object()) return out;
  out.prompt_tokens = integer_field(usage, "prompt_tokens");
  out.completion_tokens = integer_field(usage, "completion_tokens");
  if (const auto details = usage.find("prompt_tokens_details"); details != usage.end() && details->is_object())
    out.cached_tokens = integer_field(*details, "cached_tokens");
  if (out.cached_tokens == 0) out.cached_tokens = integer_field(usage, "prompt_cache_hit_tokens");  // DeepSeek
  if (const auto details = usage.find("completion_tokens_details"); details != usage.end() && details->is_object())
    out.reasoning_tokens = integer_field(*details, "reasoning_tokens");
  if (const auto cost = usage.find("cost"); cost != usage.end() && cost->is_number())  // OpenRouter
    out.cost_usd = cost->get<double>();
  return out;
}

/// Text of a `content` that is a string, null, or a list of parts.
[[nodiscard]] inline std::string openai_content_text(const nlohmann::json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  if (content.is_array())
    for (const auto& part : content)
      if (string_field(part, "type") == "text") text += string_field(part, "text");
  return text;
}

/// Reasoning under either name servers use: `reasoning_content` (SGLang, llama-server,
/// DeepSeek, older vLLM) or `reasoning` (vLLM since 0.10). Transitional servers send
/// both with the same text, so one is taken, not both.
[[nodiscard]] inline std::string openai_reasoning_text(const nlohmann::json& object) {
  for (const char* key : {"reasoning_content", "reasoning"})
    if (const auto value = object.find(key); value != object.end() && value->is_string() && !value->empty())
      return value->get<std::string>();
  return {};
}

/// An id for a call the server sent without one, so that its result can refer to it.
[[nodiscard]] inline std::string generated_tool_call_id(std::size_t index) {
  static constexpr char hex[] = "0123456789abcdef";
  std::random_device random;
  std::string id = "call_" + std::to_string(index) + "_";
  for (int i = 0; i < 12; ++i) id += hex[random() % 16];
  return id;
}

/// Whatever the model asked for when it called tools but named another reason (Ollama
/// and some templates report `stop`), the loop must run the tools.
inline void normalize_finish_reason(ChatResponse& response) {
  if (!response.message.tool_calls.empty() &&
      (response.finish_reason == FinishReason::stop || response.finish_reason == FinishReason::unknown))
    response.finish_reason = FinishReason::tool_calls;
}

[[nodiscard]] inline ToolCall openai_tool_call(const nlohmann::json& call, std::size_t index) {
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& function = call.contains("function") && call["function"].is_object() ? call["function"] : empty;
  std::string id = string_field(call, "id");
  if (id.empty()) id = generated_tool_call_id(index);
  std::string name = string_field(function, "name");
  const auto arguments = function.find("arguments");
  if (arguments == function.end() || arguments->is_null())
    return ToolCall::from_raw(std::move(id), std::move(name), "");
  if (arguments->is_string()) return ToolCall::from_raw(std::move(id), std::move(name), arguments->get<std::string>());
  return ToolCall::from_object(std::move(id), std::move(name), *arguments);  // servers that send objects
}

/// Reads a whole (non-streamed) response. Throws `LlmFailure` for an error object or a
/// response without a usable choice.
[[nodiscard]] inline ChatResponse parse_openai_response(const nlohmann::json& body, std::string_view origin) {
  if (!body.is_object())
    throw LlmFailure(LlmErrorKind::invalid_response, std::string(origin) + ": the response is not a JSON object");
  if (body.contains("error") && !body["error"].is_null()) throw classify_error_event(body, origin);
  ChatResponse response;
  response.id = string_field(body, "id");
  response.model = string_field(body, "model");
  if (body.contains("usage")) response.usage = openai_usage(body["usage"]);
  const auto choices = body.find("choices");
  if (choices == body.end() || !choices->is_array() || choices->empty() || !choices->front().is_object())
    throw LlmFailure(LlmErrorKind::invalid_response, std::string(origin) + ": the response has no choices");
  const nlohmann::json& choice = choices->front();
  if (const auto reason = choice.find("finish_reason"); reason != choice.end() && reason->is_string())
    response.finish_reason = parse_finish_reason(reason->get<std::string>());
  const auto message = choice.find("message");
  if (message == choice.end() || !message->is_object())
    throw LlmFailure(LlmErrorKind::invalid_response, std::string(origin) + ": the choice has no message");
  response.message = Message::assistant({});
  if (message->contains("content")) response.message.content = openai_content_text((*message)["content"]);
  if (const auto refusal = message->find("refusal"); refusal != message->end() && refusal->is_string()) {
    if (response.message.content.empty()) response.message.content = refusal->get<std::string>();
    response.finish_reason = FinishReason::content_filter;
  }
  response.message.reasoning.text = openai_reasoning_text(*message);
  if (const auto calls = message->find("tool_calls"); calls != message->end() && calls->is_array())
    for (const auto& call : *calls)
      if (call.is_object())
        response.message.tool_calls.push_back(openai_tool_call(call, response.message.tool_calls.size()));
  normalize_finish_reason(response);
  return response;
}

// --- streaming -------------------------------------------------------------------------------

/// Assembles streamed tool-call fragments (`delta.tool_calls[]`) into whole calls.
///
/// Fragments are keyed by `index`: the first of an index carries `id` and
/// `function.name`, later ones pieces of `function.arguments`, to be concatenated.
/// Servers bend this, and each bend is tolerated: fragments without `index` (a new `id`
/// starts a new call, otherwise the fragment continues the last one), ids and names
/// repeated in every fragment, names split across fragments, and arguments sent as a
/// whole object instead of text.
class ToolCallAssembler {
 public:
  /// What one fragment added, for progress display.
  struct Added {
    std::size_t position = 0;  ///< the call's position among the calls so far
    std::string name;          ///< the part of the name this fragment added
    std::string arguments;     ///< the part of the arguments this fragment added
  };

  Added add(const nlohmann::json& fragment) {
    Added added;
    if (!fragment.is_object()) return added;
    const std::string id = string_field(fragment, "id");
    std::int64_t key;
    if (const auto index = fragment.find("index"); index != fragment.end() && index->is_number_integer()) {
      key = index->get<std::int64_t>();
    } else if (const auto known = id.empty() ? partials_.end() : find_id(id); known != partials_.end()) {
      key = known->first;
    } else if (id.empty() && last_key_) {
      key = *last_key_;
    } else {
      key = partials_.empty() ? 0 : partials_.rbegin()->first + 1;
    }
    last_key_ = key;
    Partial& partial = partials_[key];
    if (partial.id.empty()) partial.id = id;

    const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json& function =
        fragment.contains("function") && fragment["function"].is_object() ? fragment["function"] : empty;
    const std::string name = string_field(function, "name");
    if (!name.empty() && name != partial.name) {
      partial.name += name;
      added.name = name;
    }
    if (const auto arguments = function.find("arguments"); arguments != function.end()) {
      if (arguments->is_string()) {
        added.arguments = arguments->get<std::string>();
        partial.arguments += added.arguments;
      } else if (!arguments->is_null()) {
        partial.object_arguments = *arguments;
        added.arguments = arguments->dump();
      }
    }
    added.position = static_cast<std::size_t>(std::distance(partials_.begin(), partials_.find(key)));
    return added;
  }

  [[nodiscard]] bool empty() const noexcept { return partials_.empty(); }

  /// The calls in index order, with arguments parsed (or the parse failure recorded).
  [[nodiscard]] std::vector<ToolCall> calls() const {
    std::vector<ToolCall> calls;
    for (const auto& [key, partial] : partials_) {
      std::string id = partial.id.empty() ? generated_tool_call_id(calls.size()) : partial.id;
      if (partial.object_arguments && partial.arguments.empty())
        calls.push_back(ToolCall::from_object(std::move(id), partial.name, *partial.object_arguments));
      else
        calls.push_back(ToolCall::from_raw(std::move(id), partial.name, partial.arguments));
    }
    return calls;
  }

 private:
  struct Partial {
    std::string id;
    std::string name;
    std::string arguments;
    std::optional<nlohmann::json> object_arguments;
  };

  std::map<std::int64_t, Partial>::iterator find_id(const std::string& id) {
    for (auto it = partials_.begin(); it != partials_.end(); ++it)
      if (it->second.id == id) return it;
    return partials_.end();
  }

  std::map<std::int64_t, Partial> partials_;
  std::optional<std::int64_t> last_key_;
};

/// Builds a `ChatResponse` from a Chat Completions event stream, one SSE event at a
/// time, reporting increments through `on_delta`.
///
/// The stream is complete once a `finish_reason` or `data: [DONE]` arrived; the usage
/// chunk that `include_usage` adds before `[DONE]` is taken when present and not
/// required (a cut after the finish reason loses only the token counts). A stream that
/// ends before that is incomplete and `finish()` throws a retriable `LlmFailure`. An
/// error object inside the stream (vLLM sends `data: {"error": ...}`) is thrown as the
/// failure it describes.
class OpenAiStreamAssembler {
 public:
  OpenAiStreamAssembler(std::string origin, std::function<void(const StreamDelta&)> on_delta = {})
      : origin_(std::move(origin)), on_delta_(std::move(on_delta)) {}

  void on_event(const SseEvent& event) {
    ++events_;
    const std::string_view data = trim_http_whitespace(event.data);
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    const auto chunk = nlohmann::json::parse(data, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object())
      throw LlmFailure(LlmErrorKind::invalid_response,
                       origin_ + ": a streamed chunk is not a JSON object: " + std::string(data.substr(0, 200)));
    if (event.event == "error" || (chunk.contains("error") && !chunk["error"].is_null()))
      throw classify_error_event(chunk, origin_);
    on_chunk(chunk);
  }

  /// Whether the answer is complete (a finish reason or `[DONE]` arrived).
  [[nodiscard]] bool complete() const noexcept { return done_ || finish_reason_.has_value(); }

  /// The assembled response; throws a retriable `LlmFailure` for an incomplete stream.
  [[nodiscard]] ChatResponse finish() {
    if (!complete())
      throw LlmFailure(LlmErrorKind::retriable,
                       origin_ +
                           ": the stream ended before the answer was complete (no finish_reason and no [DONE] after " +
                           std::to_string(events_) + " events)");
    response_.message.tool_calls = tool_calls_.calls();
    response_.finish_reason = refused_ ? FinishReason::content_filter : finish_reason_.value_or(FinishReason::unknown);
    normalize_finish_reason(response_);
    return std::move(response_);
  }

 private:
  void on_chunk(const nlohmann::json& chunk) {
    if (response_.id.empty()) response_.id = string_field(chunk, "id");
    if (response_.model.empty()) response_.model = string_field(chunk, "model");
    if (const auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object())
      response_.usage = openai_usage(*usage);
    const auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array()) return;
    for (const auto& choice : *choices) {
      if (!choice.is_object() || integer_field(choice, "index") != 0) continue;  // n > 1: the first choice only
      if (const auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) on_delta(*delta);
      if (const auto reason = choice.find("finish_reason"); reason != choice.end() && reason->is_string())
        finish_reason_ = parse_finish_reason(reason->get<std::string>());
    }
  }

  void on_delta(const nlohmann::json& delta) {
    StreamDelta increment;
    if (const auto content = delta.find("content"); content != delta.end())
      increment.content = openai_content_text(*content);
    if (const auto refusal = delta.find("refusal"); refusal != delta.end() && refusal->is_string()) {
      increment.content += refusal->get<std::string>();
      refused_ = true;
    }
    increment.reasoning = openai_reasoning_text(delta);
    response_.message.content += increment.content;
    response_.message.reasoning.text += increment.reasoning;
    if (!increment.content.empty() || !increment.reasoning.empty()) emit(increment);
    if (const auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array())
      for (const auto& fragment : *calls) {
        auto added = tool_calls_.add(fragment);
        StreamDelta call_delta;
        call_delta.tool_call_index = added.position;
        call_delta.tool_call_name = std::move(added.name);
        call_delta.tool_call_arguments = std::move(added.arguments);
        emit(call_delta);
      }
  }

  void emit(const StreamDelta& delta) {
    if (on_delta_) on_delta_(delta);
  }

  std::string origin_;
  std::function<void(const StreamDelta&)> on_delta_;
  ChatResponse response_;
  ToolCallAssembler tool_calls_;
  std::optional<FinishReason> finish_reason_;
  std::size_t events_ = 0;
  bool done_ = false;
  bool refused_ = false;
};

}  // namespace cuda_agent::detail
