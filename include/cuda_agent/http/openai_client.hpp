// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `OpenAiClient`: an `LlmClient` for `POST /v1/chat/completions`, as served by OpenAI
/// and by the open-source servers that speak it (vLLM, SGLang, llama-server, Ollama).
///
/// @code{.cpp}
/// cuda_agent::http::OpenAiOptions options;
/// options.model = "gpt-4.1";                       // key from OPENAI_API_KEY
/// cuda_agent::http::OpenAiClient client(options);
///
/// options = cuda_agent::http::OpenAiOptions::for_dialect(cuda_agent::http::OpenAiDialect::vllm);
/// options.model = "Qwen/Qwen3-32B";               // base URL http://127.0.0.1:8000/v1
/// cuda_agent::http::OpenAiClient local(options);
/// @endcode

#include <optional>     // optional
#include <stdexcept>    // invalid_argument
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include "cuda_agent/http/curl_transport.hpp"
#include "cuda_agent/llm/detail/openai_wire.hpp"
#include "cuda_agent/llm/llm_transport.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent::http {

/// The server on the other end, for its defaults and its departures from OpenAI's API.
enum class OpenAiDialect { openai, vllm, sglang, llama_server, ollama, generic };

[[nodiscard]] constexpr std::string_view to_string(OpenAiDialect dialect) noexcept {
  switch (dialect) {
    case OpenAiDialect::openai:
      return "openai";
    case OpenAiDialect::vllm:
      return "vllm";
    case OpenAiDialect::sglang:
      return "sglang";
    case OpenAiDialect::llama_server:
      return "llama-server";
    case OpenAiDialect::ollama:
      return "ollama";
    case OpenAiDialect::generic:
      return "openai-compatible";
  }
  return "openai-compatible";
}

/// A dialect's defaults.
struct OpenAiDialectDefaults {
  std::string_view base_url;
  std::string_view api_key_env;
  /// Without a key the server answers 401: fail at construction instead.
  bool api_key_required;
  /// Sent when no key is found (Ollama requires one and ignores it).
  std::string_view placeholder_api_key;
  std::string_view max_tokens_field;
  std::optional<bool> parallel_tool_calls;
  bool echo_invalid_arguments;
};

[[nodiscard]] constexpr OpenAiDialectDefaults dialect_defaults(OpenAiDialect dialect) noexcept {
  switch (dialect) {
    case OpenAiDialect::openai:
      return {"https://api.openai.com/v1", "OPENAI_API_KEY", true, "", "max_completion_tokens", std::nullopt, true};
    case OpenAiDialect::vllm:
      return {"http://127.0.0.1:8000/v1", "VLLM_API_KEY", false, "", "max_tokens", std::nullopt, false};
    case OpenAiDialect::sglang:
      return {"http://127.0.0.1:30000/v1", "SGLANG_API_KEY", false, "", "max_tokens", std::nullopt, false};
    case OpenAiDialect::llama_server:
      // Parallel calls are off on llama-server unless asked for; the agent wants them.
      return {"http://127.0.0.1:8080/v1", "LLAMA_API_KEY", false, "", "max_tokens", true, false};
    case OpenAiDialect::ollama:
      return {"http://127.0.0.1:11434/v1", "OLLAMA_API_KEY", false, "ollama", "max_tokens", std::nullopt, false};
    case OpenAiDialect::generic:
      return {"", "OPENAI_API_KEY", false, "", "max_tokens", std::nullopt, false};
  }
  return {"", "OPENAI_API_KEY", false, "", "max_tokens", std::nullopt, false};
}

struct OpenAiOptions {
  std::string model;
  OpenAiDialect dialect = OpenAiDialect::openai;
  /// Ending in `/v1` as a rule (`/chat/completions` is appended; a URL with no path gets
  /// `/v1`). Empty: the dialect's.
  std::string base_url;
  /// Unset: read from the environment variable `api_key_env`.
  std::optional<std::string> api_key;
  /// Empty: the dialect's (`OPENAI_API_KEY`, `VLLM_API_KEY`, `SGLANG_API_KEY`,
  /// `LLAMA_API_KEY`, `OLLAMA_API_KEY`).
  std::string api_key_env;
  bool stream = true;
  /// Ask streams for their final usage chunk.
  bool include_usage = true;
  /// Used when the request sets no limit; unset: the server's default.
  std::optional<int> default_max_tokens;
  /// Unset: the dialect's (`max_completion_tokens` for OpenAI, `max_tokens` elsewhere).
  std::optional<std::string> max_tokens_field;
  /// Sent when the request leaves `parallel_tool_calls` unset; unset: the dialect's.
  std::optional<bool> default_parallel_tool_calls;
  /// Send malformed tool arguments back verbatim; unset: the dialect's (see
  /// `detail::OpenAiWireSettings`).
  std::optional<bool> echo_invalid_arguments;
  /// Non-empty: assistant reasoning goes back to the server under this field.
  std::string reasoning_echo_field;
  TransportOptions transport;

  [[nodiscard]] static OpenAiOptions for_dialect(OpenAiDialect dialect) {
    OpenAiOptions options;
    options.dialect = dialect;
    return options;
  }
};

class OpenAiClient {
 public:
  explicit OpenAiClient(OpenAiOptions options)
      : options_(complete_options(std::move(options))), endpoint_(make_endpoint(options_)) {
    const OpenAiDialectDefaults defaults = dialect_defaults(options_.dialect);
    const std::string key = resolve_api_key(options_.api_key, options_.api_key_env, defaults.api_key_required,
                                            defaults.placeholder_api_key, endpoint_.name);
    if (!key.empty()) endpoint_.headers.push_back("Authorization: Bearer " + key);
    wire_.model = options_.model;
    wire_.stream = options_.stream;
    wire_.include_usage = options_.include_usage;
    wire_.max_tokens_field = options_.max_tokens_field.value_or(std::string(defaults.max_tokens_field));
    wire_.default_max_tokens = options_.default_max_tokens;
    wire_.default_parallel_tool_calls =
        options_.default_parallel_tool_calls ? options_.default_parallel_tool_calls : defaults.parallel_tool_calls;
    wire_.echo_invalid_arguments = options_.echo_invalid_arguments.value_or(defaults.echo_invalid_arguments);
    wire_.reasoning_echo_field = options_.reasoning_echo_field;
  }

  /// `dialect:model@base-url`, e.g. `vllm:Qwen/Qwen3-32B@http://127.0.0.1:8000/v1`.
  [[nodiscard]] std::string_view name() const noexcept { return endpoint_.name; }
  [[nodiscard]] const OpenAiOptions& options() const noexcept { return options_; }

  /// The body `complete(request)` sends.
  [[nodiscard]] nlohmann::json request_body(const ChatRequest& request) const {
    return detail::openai_request_body(request, wire_);
  }

  /// One chat turn. Safe to call from several threads at once.
  [[nodiscard]] ChatResponse complete(const ChatRequest& request) const {
    return endpoint_.call<detail::OpenAiStreamAssembler>(request_body(request), request,
                                                         [](const nlohmann::json& json, const std::string& origin) {
                                                           return detail::parse_openai_response(json, origin);
                                                         });
  }

 private:
  static OpenAiOptions complete_options(OpenAiOptions options) {
    const OpenAiDialectDefaults defaults = dialect_defaults(options.dialect);
    if (options.model.empty()) throw std::invalid_argument("OpenAiClient needs a model name (OpenAiOptions::model)");
    if (options.base_url.empty()) options.base_url = defaults.base_url;
    if (options.base_url.empty())
      throw std::invalid_argument(
          "OpenAiClient: an OpenAI-compatible server needs a base URL (OpenAiOptions::base_url)");
    if (options.api_key_env.empty()) options.api_key_env = defaults.api_key_env;
    return options;
  }

  static detail::HttpChatEndpoint make_endpoint(const OpenAiOptions& options) {
    return {options.transport, endpoint_url(options.base_url, "/chat/completions"),
            std::string(to_string(options.dialect)) + ":" + options.model + "@" + options.base_url, options.stream,
            options.api_key ? std::string() : options.api_key_env};
  }

  OpenAiOptions options_;
  detail::HttpChatEndpoint endpoint_;
  detail::OpenAiWireSettings wire_;
};

static_assert(LlmClient<OpenAiClient>);

}  // namespace cuda_agent::http
