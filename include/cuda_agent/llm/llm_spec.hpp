// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Choosing a model backend with one string, as the command-line program does.
///
/// @code{.unparsed}
///   <provider>:<model>[@<base-url>][?<option>=<value>[&<option>=<value>...]]
///   replay:<trajectory.jsonl>[?strict=true]
///   scripted:<responses.json>
/// @endcode
///
/// | provider            | default base URL            | API key variable          |
/// | ------------------- | --------------------------- | ------------------------- |
/// | `openai`            | https://api.openai.com/v1   | OPENAI_API_KEY (required) |
/// | `anthropic`         | https://api.anthropic.com   | ANTHROPIC_API_KEY (req.)  |
/// | `vllm`              | http://127.0.0.1:8000/v1    | VLLM_API_KEY (optional)   |
/// | `sglang`            | http://127.0.0.1:30000/v1   | SGLANG_API_KEY (optional) |
/// | `llama-server`      | http://127.0.0.1:8080/v1    | LLAMA_API_KEY (optional)  |
/// | `ollama`            | http://127.0.0.1:11434/v1   | OLLAMA_API_KEY (optional) |
/// | `openai-compatible` | (required)                  | OPENAI_API_KEY (optional) |
///
/// The base URL follows the last `@` and must start with `http://` or `https://`; model
/// names may contain `:` and `/` (`ollama:qwen2.5-coder:32b`, `vllm:Qwen/Qwen3-32B`).
/// Options follow the first `?` (values are taken literally, without URL escapes):
///
/// | option | providers | meaning |
/// | --- | --- | --- |
/// | `api_key_env=NAME` | HTTP | read the key from `$NAME` |
/// | `stream=true\|false` | HTTP | stream answers (default true) |
/// | `max_tokens=N` | HTTP | token limit for requests that set none |
/// | `timeout=S`, `connect_timeout=S`, `idle_timeout=S` | HTTP | seconds (see `Timeouts`) |
/// | `retries=N` | HTTP | retries after the first attempt |
/// | `ca_file=PATH`, `ca_path=DIR`, `verify_peer=false` | HTTP | TLS (see `TlsOptions`) |
/// | `proxy=URL`, `no_proxy=HOSTS` | HTTP | proxy (default: the environment's) |
/// | `parallel_tool_calls=true\|false` | OpenAI-compatible | sent when a request leaves it unset |
/// | `max_tokens_field=NAME` | OpenAI-compatible | `max_tokens` or `max_completion_tokens` |
/// | `reasoning_echo=FIELD` | OpenAI-compatible | send reasoning back under FIELD |
/// | `thinking=N` | anthropic | extended thinking with a budget of N tokens |
/// | `strict=true` | replay | stop at the first structural divergence |
/// | `mask_numbers=true` | replay | digits do not count as content differences |
///
/// `make_llm_client` here builds the clients that need no network (replay, scripted);
/// `cuda_agent::http::make_llm_client` (cuda_agent/http/make_client.hpp, target
/// `cuda_agent::http`) builds all of them.

#include <algorithm>     // find, find_if
#include <charconv>      // from_chars
#include <chrono>        // milliseconds
#include <cstdint>       // int64_t
#include <filesystem>    // path
#include <functional>    // function
#include <map>           // map
#include <optional>      // optional
#include <stdexcept>     // invalid_argument
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // errc
#include <utility>       // move
#include <vector>        // vector

#include "cuda_agent/llm/replay_client.hpp"
#include "cuda_agent/llm/scripted_client.hpp"
#include "cuda_agent/llm_client.hpp"

namespace cuda_agent {

/// A spec string that cannot be used; the message says what is wrong and how to write it.
class LlmSpecError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A parsed spec string.
struct LlmSpec {
  /// The string as given.
  std::string text;
  std::string provider;
  std::string model;
  /// Empty: the provider's default.
  std::string base_url;
  /// `replay` and `scripted`: the file.
  std::filesystem::path file;
  std::map<std::string, std::string> options;

  /// Whether building the client needs the `http` component.
  [[nodiscard]] bool needs_http() const { return provider != "replay" && provider != "scripted"; }

  [[nodiscard]] std::optional<std::string> option(std::string_view name) const {
    const auto found = options.find(std::string(name));
    if (found == options.end()) return std::nullopt;
    return found->second;
  }

  /// A `true`/`false` option; throws `LlmSpecError` for other values.
  [[nodiscard]] std::optional<bool> flag(std::string_view name) const {
    const auto value = option(name);
    if (!value) return std::nullopt;
    if (*value == "true" || *value == "1" || *value == "yes" || *value == "on") return true;
    if (*value == "false" || *value == "0" || *value == "no" || *value == "off") return false;
    throw LlmSpecError(error_prefix() + "option " + std::string(name) + "=" + *value + " must be true or false");
  }

  /// A non-negative integer option; throws `LlmSpecError` for other values.
  [[nodiscard]] std::optional<std::int64_t> integer(std::string_view name) const {
    const auto value = option(name);
    if (!value) return std::nullopt;
    std::int64_t number = 0;
    const auto [end, error] = std::from_chars(value->data(), value->data() + value->size(), number);
    if (error != std::errc() || end != value->data() + value->size() || number < 0)
      throw LlmSpecError(error_prefix() + "option " + std::string(name) + "=" + *value +
                         " must be a non-negative whole number");
    return number;
  }

  /// A positive number of seconds, as milliseconds; throws `LlmSpecError` otherwise.
  [[nodiscard]] std::optional<std::chrono::milliseconds> seconds(std::string_view name) const {
    const auto value = option(name);
    if (!value) return std::nullopt;
    double number = -1;
    const auto [end, error] = std::from_chars(value->data(), value->data() + value->size(), number);
    if (error != std::errc() || end != value->data() + value->size() || !(number > 0) || number > 1e7)
      throw LlmSpecError(error_prefix() + "option " + std::string(name) + "=" + *value +
                         " must be a positive number of seconds");
    return std::chrono::milliseconds(static_cast<std::int64_t>(number * 1000.0));
  }

  [[nodiscard]] std::string error_prefix() const { return "LLM spec '" + text + "': "; }
};

namespace detail {

struct LlmProviderInfo {
  std::string_view name;
  bool has_model;  ///< <provider>:<model>[@url]; otherwise <provider>:<file>
  std::vector<std::string_view> options;
};

[[nodiscard]] inline std::vector<LlmProviderInfo> llm_providers() {
  const std::vector<std::string_view> http = {"api_key_env",     "stream",       "max_tokens", "timeout",
                                              "connect_timeout", "idle_timeout", "retries",    "ca_file",
                                              "ca_path",         "verify_peer",  "proxy",      "no_proxy"};
  const auto with = [&](std::vector<std::string_view> more) {
    more.insert(more.begin(), http.begin(), http.end());
    return more;
  };
  const auto compatible = with({"parallel_tool_calls", "max_tokens_field", "reasoning_echo"});
  return {
      {"openai", true, compatible},
      {"vllm", true, compatible},
      {"sglang", true, compatible},
      {"llama-server", true, compatible},
      {"ollama", true, compatible},
      {"openai-compatible", true, compatible},
      {"anthropic", true, with({"thinking"})},
      {"replay", false, {"strict", "mask_numbers"}},
      {"scripted", false, {}},
  };
}

}  // namespace detail

/// Parses a spec string (grammar in the file comment). Throws `LlmSpecError` saying
/// what is wrong: an unknown provider, a missing model or file, a base URL without a
/// scheme, an unknown option or one without a value.
[[nodiscard]] inline LlmSpec parse_llm_spec(std::string_view text) {
  LlmSpec spec;
  spec.text = std::string(text);
  const std::string prefix = spec.error_prefix();
  const auto colon = text.find(':');
  const auto providers = detail::llm_providers();
  std::string known;
  for (const auto& provider : providers) known += (known.empty() ? "" : ", ") + std::string(provider.name);
  if (colon == std::string_view::npos || colon == 0)
    throw LlmSpecError(prefix + "expected <provider>:<model>[@<base-url>] or replay:<file> (providers: " + known + ")");
  spec.provider = std::string(text.substr(0, colon));
  const auto provider =
      std::find_if(providers.begin(), providers.end(), [&](const auto& info) { return info.name == spec.provider; });
  if (provider == providers.end())
    throw LlmSpecError(prefix + "unknown provider '" + spec.provider + "' (known: " + known + ")");

  std::string_view rest = text.substr(colon + 1);
  if (const auto question = rest.find('?'); question != std::string_view::npos) {
    std::string_view options = rest.substr(question + 1);
    rest = rest.substr(0, question);
    while (!options.empty()) {
      const auto amp = options.find('&');
      const std::string_view pair = options.substr(0, amp);
      options = amp == std::string_view::npos ? std::string_view{} : options.substr(amp + 1);
      if (pair.empty()) continue;
      const auto equals = pair.find('=');
      const std::string name(pair.substr(0, equals));
      if (std::find(provider->options.begin(), provider->options.end(), name) == provider->options.end()) {
        std::string allowed;
        for (const auto option : provider->options) allowed += (allowed.empty() ? "" : ", ") + std::string(option);
        throw LlmSpecError(prefix + "unknown option '" + name + "' for " + spec.provider +
                           (allowed.empty() ? " (it takes none)" : " (known: " + allowed + ")"));
      }
      if (equals == std::string_view::npos || equals + 1 == pair.size())
        throw LlmSpecError(prefix + "option '" + name + "' needs a value: " + name + "=...");
      spec.options[name] = std::string(pair.substr(equals + 1));
    }
  }

  if (!provider->has_model) {
    if (rest.empty()) throw LlmSpecError(prefix + "expected " + spec.provider + ":<file>");
    spec.file = std::filesystem::path(std::string(rest));
    return spec;
  }
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view url = rest.substr(at + 1);
    if (url.starts_with("http://") || url.starts_with("https://")) {
      spec.base_url = std::string(url);
      rest = rest.substr(0, at);
      if (url.find("://") + 3 == url.size())
        throw LlmSpecError(prefix + "the base URL '" + spec.base_url + "' has no host");
    } else if (url.find("://") != std::string_view::npos) {
      throw LlmSpecError(prefix + "the base URL '" + std::string(url) + "' must use http:// or https://");
    } else if (url.find('/') != std::string_view::npos || url.find(':') != std::string_view::npos) {
      throw LlmSpecError(prefix + "the base URL '" + std::string(url) + "' needs a scheme: write http://" +
                         std::string(url) + " (or https://)");
    }
  }
  if (rest.empty())
    throw LlmSpecError(prefix + "missing model name: write " + spec.provider + ":<model>" +
                       (spec.provider == "anthropic" ? "" : "[@<base-url>]"));
  spec.model = std::string(rest);
  if (spec.provider == "openai-compatible" && spec.base_url.empty())
    throw LlmSpecError(prefix + "openai-compatible needs a base URL: openai-compatible:<model>@https://host/v1");
  return spec;
}

/// Builds an HTTP client from a spec; what `cuda_agent::http::make_llm_client` supplies.
using HttpLlmFactory = std::function<AnyLlmClient(const LlmSpec&)>;

/// Builds the client a spec names. `replay` and `scripted` are built here; HTTP
/// providers go to `http_factory`, and without one the error says how to get it.
[[nodiscard]] inline AnyLlmClient make_llm_client(const LlmSpec& spec, const HttpLlmFactory& http_factory = {}) {
  if (spec.provider == "replay") {
    ReplayOptions options;
    options.stop_on_structural_divergence = spec.flag("strict").value_or(false);
    if (spec.flag("mask_numbers").value_or(false)) options.normalize = &ReplayOptions::mask_numbers;
    if (!std::filesystem::exists(spec.file))
      throw LlmSpecError(spec.error_prefix() + "no trajectory file at " + spec.file.string());
    return ReplayClient(spec.file, std::move(options));
  }
  if (spec.provider == "scripted") {
    if (!std::filesystem::exists(spec.file))
      throw LlmSpecError(spec.error_prefix() + "no script file at " + spec.file.string());
    return ScriptedClient::from_file(spec.file);
  }
  if (!http_factory)
    throw LlmSpecError(spec.error_prefix() + "'" + spec.provider +
                       "' needs the HTTP component: include <cuda_agent/http/make_client.hpp>, link "
                       "cuda_agent::http and call cuda_agent::http::make_llm_client");
  return http_factory(spec);
}

[[nodiscard]] inline AnyLlmClient make_llm_client(std::string_view spec, const HttpLlmFactory& http_factory = {}) {
  return make_llm_client(parse_llm_spec(spec), http_factory);
}

}  // namespace cuda_agent
