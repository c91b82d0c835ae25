// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `AnthropicClient`: an `LlmClient` for Anthropic's Messages API (`POST /v1/messages`).
///
/// @code{.cpp}
/// cuda_agent::http::AnthropicOptions options;
/// options.model = "claude-sonnet-4-5";            // key from ANTHROPIC_API_KEY
/// options.thinking_budget_tokens = 4096;          // extended thinking, echoed back unchanged
/// cuda_agent::http::AnthropicClient client(options);
/// @endcode

#include <optional>     // optional
#include <stdexcept>    // invalid_argument
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include "cuda_agent/http/curl_transport.hpp"
#include "cuda_agent/llm/detail/anthropic_wire.hpp"
#include "cuda_agent/llm/llm_transport.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent::http {

struct AnthropicOptions {
  std::string model;
  /// Without `/v1` as a rule (`/v1/messages` is appended; `/messages` to a URL that
  /// already ends in `/v1`).
  std::string base_url = "https://api.anthropic.com";
  /// Unset: read from the environment variable `api_key_env`.
  std::optional<std::string> api_key;
  std::string api_key_env = "ANTHROPIC_API_KEY";
  std::string api_version = std::string(detail::anthropic_api_version);
  /// `anthropic-beta` features, joined with commas.
  std::vector<std::string> betas;
  bool stream = true;
  /// The API requires a limit; used when the request sets none.
  int default_max_tokens = 8192;
  /// Extended thinking with this budget (it must stay below the token limit); unset: off.
  std::optional<int> thinking_budget_tokens;
  TransportOptions transport;
};

class AnthropicClient {
 public:
  explicit AnthropicClient(AnthropicOptions options)
      : options_(checked(std::move(options))), endpoint_(make_endpoint(options_)) {
    const std::string key = resolve_api_key(options_.api_key, options_.api_key_env, true, "", endpoint_.name);
    endpoint_.headers.push_back("x-api-key: " + key);
    endpoint_.headers.push_back("anthropic-version: " + options_.api_version);
    if (!options_.betas.empty()) {
      std::string betas;
      for (const std::string& beta : options_.betas) betas += (betas.empty() ? "" : ",") + beta;
      endpoint_.headers.push_back("anthropic-beta: " + betas);
    }
    wire_.model = options_.model;
    wire_.stream = options_.stream;
    wire_.default_max_tokens = options_.default_max_tokens;
    wire_.thinking_budget_tokens = options_.thinking_budget_tokens;
  }

  /// `anthropic:model@base-url`.
  [[nodiscard]] std::string_view name() const noexcept { return endpoint_.name; }
  [[nodiscard]] const AnthropicOptions& options() const noexcept { return options_; }

  /// The body `complete(request)` sends.
  [[nodiscard]] nlohmann::json request_body(const ChatRequest& request) const {
    return detail::anthropic_request_body(request, wire_);
  }

  /// One chat turn. Safe to call from several threads at once.
  [[nodiscard]] ChatResponse complete(const ChatRequest& request) const {
    return endpoint_.call<detail::AnthropicStreamAssembler>(request_body(request), request,
                                                            [](const nlohmann::json& json, const std::string& origin) {
                                                              return detail::parse_anthropic_response(json, origin);
                                                            });
  }

 private:
  static AnthropicOptions checked(AnthropicOptions options) {
    if (options.model.empty())
      throw std::invalid_argument("AnthropicClient needs a model name (AnthropicOptions::model)");
    if (options.base_url.empty()) throw std::invalid_argument("AnthropicClient needs a base URL");
    return options;
  }

  static detail::HttpChatEndpoint make_endpoint(const AnthropicOptions& options) {
    std::string base = options.base_url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    return {options.transport, base.ends_with("/v1") ? base + "/messages" : base + "/v1/messages",
            "anthropic:" + options.model + "@" + options.base_url, options.stream,
            options.api_key ? std::string() : options.api_key_env};
  }

  AnthropicOptions options_;
  detail::HttpChatEndpoint endpoint_;
  detail::AnthropicWireSettings wire_;
};

static_assert(LlmClient<AnthropicClient>);

}  // namespace cuda_agent::http
