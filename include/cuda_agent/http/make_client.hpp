// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `cuda_agent::http::make_llm_client(spec)`: every client a spec string can name
/// (grammar and options in cuda_agent/llm/llm_spec.hpp), HTTP backends included.
///
/// @code{.cpp}
/// auto client = cuda_agent::http::make_llm_client("vllm:Qwen/Qwen3-32B@http://127.0.0.1:8000/v1");
/// auto response = client.complete(request);
/// @endcode

#include <algorithm>    // min
#include <cstdint>      // int64_t
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move

#include "cuda_agent/http/anthropic_client.hpp"
#include "cuda_agent/http/openai_client.hpp"
#include "cuda_agent/llm/llm_spec.hpp"
#include "cuda_agent/llm/llm_transport.hpp"
#include "cuda_agent/llm_client.hpp"

namespace cuda_agent::http {

/// The transport options a spec sets (timeouts, retries, TLS, proxy), over the defaults.
[[nodiscard]] inline TransportOptions transport_options(const LlmSpec& spec, TransportOptions options = {}) {
  if (const auto total = spec.seconds("timeout")) options.timeouts.total = *total;
  if (const auto connect = spec.seconds("connect_timeout")) options.timeouts.connect = *connect;
  if (const auto idle = spec.seconds("idle_timeout")) options.timeouts.idle = *idle;
  if (const auto retries = spec.integer("retries"))
    options.retry.max_retries = static_cast<int>(std::min<std::int64_t>(*retries, 100));
  if (const auto file = spec.option("ca_file")) options.tls.ca_file = *file;
  if (const auto path = spec.option("ca_path")) options.tls.ca_path = *path;
  if (const auto verify = spec.flag("verify_peer")) options.tls.verify_peer = *verify;
  if (const auto proxy = spec.option("proxy")) options.proxy.url = *proxy;
  if (const auto no_proxy = spec.option("no_proxy")) options.proxy.no_proxy = *no_proxy;
  return options;
}

/// Builds the HTTP client of an HTTP provider's spec; `base` supplies transport
/// settings the spec cannot express (headers, a retry observer).
[[nodiscard]] inline AnyLlmClient make_http_client(const LlmSpec& spec, const TransportOptions& base = {}) {
  const auto max_tokens = spec.integer("max_tokens");
  if (max_tokens && (*max_tokens == 0 || *max_tokens > 10'000'000))
    throw LlmSpecError(spec.error_prefix() + "option max_tokens must be between 1 and 10000000");
  try {
    if (spec.provider == "anthropic") {
      AnthropicOptions options;
      options.model = spec.model;
      if (!spec.base_url.empty()) options.base_url = spec.base_url;
      if (const auto variable = spec.option("api_key_env")) options.api_key_env = *variable;
      options.stream = spec.flag("stream").value_or(true);
      if (max_tokens) options.default_max_tokens = static_cast<int>(*max_tokens);
      if (const auto budget = spec.integer("thinking")) options.thinking_budget_tokens = static_cast<int>(*budget);
      options.transport = transport_options(spec, base);
      return AnthropicClient(std::move(options));
    }
    OpenAiOptions options;
    if (spec.provider == "openai")
      options.dialect = OpenAiDialect::openai;
    else if (spec.provider == "vllm")
      options.dialect = OpenAiDialect::vllm;
    else if (spec.provider == "sglang")
      options.dialect = OpenAiDialect::sglang;
    else if (spec.provider == "llama-server")
      options.dialect = OpenAiDialect::llama_server;
    else if (spec.provider == "ollama")
      options.dialect = OpenAiDialect::ollama;
    else if (spec.provider == "openai-compatible")
      options.dialect = OpenAiDialect::generic;
    else
      throw LlmSpecError(spec.error_prefix() + "'" + spec.provider + "' is not an HTTP provider");
    options.model = spec.model;
    options.base_url = spec.base_url;
    if (const auto variable = spec.option("api_key_env")) options.api_key_env = *variable;
    options.stream = spec.flag("stream").value_or(true);
    if (max_tokens) options.default_max_tokens = static_cast<int>(*max_tokens);
    options.default_parallel_tool_calls = spec.flag("parallel_tool_calls");
    if (const auto field = spec.option("max_tokens_field")) {
      if (*field != "max_tokens" && *field != "max_completion_tokens")
        throw LlmSpecError(spec.error_prefix() + "max_tokens_field must be max_tokens or max_completion_tokens");
      options.max_tokens_field = *field;
    }
    if (const auto field = spec.option("reasoning_echo")) options.reasoning_echo_field = *field;
    options.transport = transport_options(spec, base);
    return OpenAiClient(std::move(options));
  } catch (const LlmError& error) {
    // A missing key: say how to name another variable from the spec itself.
    throw LlmError(error.kind(),
                   spec.error_prefix() + error.what() + ", or name another variable with ?api_key_env=NAME");
  }
}

/// Builds the client any spec names (HTTP, replay, scripted).
[[nodiscard]] inline AnyLlmClient make_llm_client(const LlmSpec& spec, const TransportOptions& base = {}) {
  return cuda_agent::make_llm_client(spec,
                                     [&base](const LlmSpec& http_spec) { return make_http_client(http_spec, base); });
}

[[nodiscard]] inline AnyLlmClient make_llm_client(std::string_view spec, const TransportOptions& base = {}) {
  return make_llm_client(parse_llm_spec(spec), base);
}

}  // namespace cuda_agent::http
