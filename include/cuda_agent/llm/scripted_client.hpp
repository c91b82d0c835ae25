// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `ScriptedClient`: an `LlmClient` that answers from a fixed list of responses (and
/// errors), in order. For tests of everything above the model, and for demos that must
/// run without one.
///
/// The file form (`ScriptedClient::from_file`, spec `scripted:<file.json>`):
/// @code{.json}
/// {
///   "name": "two-step demo",
///   "responses": [
///     {"content": "Let me look.", "tool_calls": [{"id": "c1", "type": "function",
///       "function": {"name": "Read", "arguments": "{\"file_path\": \"model.py\"}"}}]},
///     {"error": {"kind": "retriable", "message": "HTTP 503", "http_status": 503}},
///     {"message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop",
///      "usage": {"prompt_tokens": 900, "completion_tokens": 12}}
///   ]
/// }
/// @endcode
/// An entry is a response (`message`, optional `finish_reason`, `usage`, `model`), a bare
/// assistant message (its fields at the top level, `role` optional), or an `error` that
/// `complete` throws as `LlmError`. The top level may also be the list alone. Without a
/// `finish_reason`, a message with tool calls finishes with `tool_calls`, others with
/// `stop`.

#include <cstddef>      // size_t
#include <filesystem>   // path
#include <fstream>      // ifstream
#include <optional>     // optional
#include <stdexcept>    // runtime_error, invalid_argument
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <variant>      // variant, get_if, holds_alternative
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent {

/// A scripted failure: what `complete` throws at this step.
struct ScriptedError {
  LlmErrorKind kind = LlmErrorKind::retriable;
  std::string message;
  int http_status = 0;
};

/// One step of a script.
using ScriptedStep = std::variant<ChatResponse, ScriptedError>;

namespace detail {

[[nodiscard]] inline std::optional<LlmErrorKind> parse_llm_error_kind(std::string_view text) noexcept {
  for (const LlmErrorKind kind :
       {LlmErrorKind::retriable, LlmErrorKind::fatal, LlmErrorKind::context_overflow, LlmErrorKind::invalid_request,
        LlmErrorKind::invalid_response, LlmErrorKind::cancelled})
    if (to_string(kind) == text) return kind;
  return std::nullopt;
}

/// Sends a whole response as the increments a streaming client would have shown.
inline void replay_as_deltas(const ChatResponse& response, const ChatRequest& request) {
  if (!request.on_delta) return;
  const Message& message = response.message;
  if (!message.reasoning.text.empty()) {
    StreamDelta delta;
    delta.reasoning = message.reasoning.text;
    request.on_delta(delta);
  }
  if (!message.content.empty()) {
    StreamDelta delta;
    delta.content = message.content;
    request.on_delta(delta);
  }
  for (std::size_t index = 0; index < message.tool_calls.size(); ++index) {
    StreamDelta delta;
    delta.tool_call_index = index;
    delta.tool_call_name = message.tool_calls[index].name;
    delta.tool_call_arguments = message.tool_calls[index].raw_arguments;
    request.on_delta(delta);
  }
}

}  // namespace detail

class ScriptedClient {
 public:
  explicit ScriptedClient(std::vector<ScriptedStep> steps, std::string name = "scripted")
      : steps_(std::move(steps)), name_(std::move(name)) {}

  explicit ScriptedClient(const std::vector<ChatResponse>& responses, std::string name = "scripted")
      : steps_(responses.begin(), responses.end()), name_(std::move(name)) {}

  /// Reads the JSON form described in the file comment. Throws `std::invalid_argument`
  /// naming the entry that is wrong.
  [[nodiscard]] static ScriptedClient from_json(const nlohmann::json& script, std::string name = "scripted") {
    const nlohmann::json* entries = &script;
    if (script.is_object()) {
      if (script.contains("name") && script["name"].is_string()) name = script["name"].get<std::string>();
      if (!script.contains("responses"))
        throw std::invalid_argument("a script needs a \"responses\" list (or is that list itself)");
      entries = &script["responses"];
    }
    if (!entries->is_array()) throw std::invalid_argument("a script's \"responses\" must be a list");
    std::vector<ScriptedStep> steps;
    for (std::size_t index = 0; index < entries->size(); ++index) {
      try {
        steps.push_back(parse_step((*entries)[index]));
      } catch (const std::exception& error) {
        throw std::invalid_argument("script entry " + std::to_string(index) + ": " + error.what());
      }
    }
    return ScriptedClient(std::move(steps), std::move(name));
  }

  [[nodiscard]] static ScriptedClient from_file(const std::filesystem::path& path) {
    std::ifstream stream(path);
    if (!stream) throw std::invalid_argument("cannot read the script " + path.string());
    const auto script = nlohmann::json::parse(stream, nullptr, false);
    if (script.is_discarded()) throw std::invalid_argument(path.string() + " is not valid JSON");
    try {
      return from_json(script, "scripted:" + path.string());
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(path.string() + ": " + error.what());
    }
  }

  [[nodiscard]] std::string_view name() const noexcept { return name_; }

  /// The next step: its response, or its error thrown. Past the end of the script,
  /// throws `LlmError{fatal}`.
  [[nodiscard]] ChatResponse complete(const ChatRequest& request) {
    if (request.cancellation.stop_requested()) throw LlmError(LlmErrorKind::cancelled, name_ + ": cancelled");
    ChatRequest recorded = request;
    recorded.on_delta = nullptr;
    recorded.cancellation = {};
    requests_.push_back(std::move(recorded));
    if (next_ >= steps_.size())
      throw LlmError(LlmErrorKind::fatal,
                     name_ + ": the script has no response left (it has " + std::to_string(steps_.size()) + ")");
    const ScriptedStep& step = steps_[next_++];
    if (const auto* error = std::get_if<ScriptedError>(&step))
      throw LlmError(error->kind, error->message, error->http_status);
    const ChatResponse& response = std::get<ChatResponse>(step);
    detail::replay_as_deltas(response, request);
    return response;
  }

  /// Continues a resumed episode: skips the steps up to and including the `turns`-th
  /// response (the answers the interrupted run already received and recorded).
  void resume_after(int turns) {
    for (int answered = 0; answered < turns && next_ < steps_.size(); ++next_)
      if (std::holds_alternative<ChatResponse>(steps_[next_])) ++answered;
  }

  /// Every request received, in order (without their callbacks).
  [[nodiscard]] const std::vector<ChatRequest>& requests() const noexcept { return requests_; }
  [[nodiscard]] std::size_t remaining() const noexcept { return steps_.size() - next_; }

 private:
  static ScriptedStep parse_step(const nlohmann::json& entry) {
    if (!entry.is_object()) throw std::invalid_argument("an entry must be an object");
    if (const auto error = entry.find("error"); error != entry.end()) {
      if (!error->is_object()) throw std::invalid_argument("\"error\" must be an object");
      ScriptedError scripted;
      const std::string kind = error->value("kind", "retriable");
      const auto parsed = detail::parse_llm_error_kind(kind);
      if (!parsed) throw std::invalid_argument("unknown error kind \"" + kind + "\"");
      scripted.kind = *parsed;
      scripted.message = error->value("message", "scripted " + kind + " error");
      scripted.http_status = error->value("http_status", 0);
      return scripted;
    }
    nlohmann::json message = entry.contains("message") ? entry["message"] : entry;
    if (!message.is_object()) throw std::invalid_argument("\"message\" must be an object");
    if (!message.contains("role")) message["role"] = "assistant";
    ChatResponse response;
    response.message = message.get<Message>();
    if (response.message.role != Role::assistant)
      throw std::invalid_argument("a response must be an assistant message");
    response.finish_reason = response.message.tool_calls.empty() ? FinishReason::stop : FinishReason::tool_calls;
    if (const auto reason = entry.find("finish_reason"); reason != entry.end())
      response.finish_reason = parse_finish_reason(reason->get<std::string>());
    if (const auto usage = entry.find("usage"); usage != entry.end()) response.usage = usage->get<Usage>();
    response.model = entry.value("model", "");
    return response;
  }

  std::vector<ScriptedStep> steps_;
  std::string name_;
  std::size_t next_ = 0;
  std::vector<ChatRequest> requests_;
};

static_assert(LlmClient<ScriptedClient>);
static_assert(ResumableLlmClient<ScriptedClient>);

}  // namespace cuda_agent
