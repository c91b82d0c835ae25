// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The transport policy of the HTTP LLM clients, without the transport: classifying
/// failures (retriable, fatal, context overflow, ...) from statuses and error bodies of
/// every dialect, reading `retry-after`, computing backoff, and the retry loop itself.

#include <algorithm>           // min, max, clamp, transform
#include <cctype>              // tolower, isdigit
#include <charconv>            // from_chars
#include <chrono>              // milliseconds, system_clock, sys_days
#include <cmath>               // pow, isfinite
#include <condition_variable>  // condition_variable_any
#include <cstdint>             // int64_t
#include <map>                 // map
#include <mutex>               // mutex, unique_lock
#include <optional>            // optional
#include <random>              // mt19937_64, uniform_real_distribution, random_device
#include <stop_token>          // stop_token
#include <string>              // string, to_string
#include <string_view>         // string_view
#include <system_error>        // errc
#include <utility>             // move, pair

#include <nlohmann/json.hpp>

#include "cuda_agent/llm/llm_transport.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent::detail {

/// Response headers, names in lower case.
using HttpHeaders = std::map<std::string, std::string>;

[[nodiscard]] inline std::string lowercase_ascii(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

[[nodiscard]] inline std::string_view trim_http_whitespace(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

/// `object[key]` when `object` is an object holding a string there, else "". Bodies
/// come from servers and are read without trusting their types.
[[nodiscard]] inline std::string string_field(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return {};
  const auto value = object.find(key);
  return value != object.end() && value->is_string() ? value->get<std::string>() : std::string();
}

/// `object[key]` when it is an integer, else `fallback`.
[[nodiscard]] inline std::int64_t integer_field(const nlohmann::json& object, std::string_view key,
                                                std::int64_t fallback = 0) {
  if (!object.is_object()) return fallback;
  const auto value = object.find(key);
  return value != object.end() && value->is_number_integer() ? value->get<std::int64_t>() : fallback;
}

/// An LLM call that failed in a way the retry loop decides about: whether asking again
/// may help, and after how long the server wants to be asked.
class LlmFailure : public LlmError {
 public:
  LlmFailure(LlmErrorKind kind, const std::string& message, int http_status = 0,
             std::optional<std::chrono::milliseconds> retry_after = std::nullopt)
      : LlmError(kind, message, http_status),
        retry_(kind == LlmErrorKind::retriable || kind == LlmErrorKind::invalid_response),
        retry_after_(retry_after) {}

  [[nodiscard]] bool retry() const noexcept { return retry_; }
  void set_retry(bool retry) noexcept { retry_ = retry; }
  [[nodiscard]] std::optional<std::chrono::milliseconds> retry_after() const noexcept { return retry_after_; }

 private:
  bool retry_;
  std::optional<std::chrono::milliseconds> retry_after_;
};

// --- error bodies ---------------------------------------------------------------------------

/// The parts of an error body that decide what it means. Dialects differ in shape:
///   OpenAI, llama-server, newer vLLM:  {"error": {"message", "type", "code", "param", ...}}
///   older vLLM, SGLang:                {"object": "error", "message", "type", "code": 400}
///   Anthropic:                         {"type": "error", "error": {"type", "message", "details"}}
///   FastAPI validation and proxies:    {"detail": ...}, {"error": "text"}, or plain text
struct ErrorDetails {
  std::string type;
  std::string code;
  std::string message;
  /// Anthropic's `error.details.error_code` (e.g. `enforced_spend_limit_reached`).
  std::string detail_code;
  /// A numeric `code` the body carries (vLLM, SGLang), else 0.
  int numeric_code = 0;
};

[[nodiscard]] inline ErrorDetails error_details(const nlohmann::json& body) {
  ErrorDetails details;
  const nlohmann::json* error = &body;
  if (const auto inner = body.find("error"); inner != body.end()) {
    if (inner->is_object())
      error = &*inner;
    else if (inner->is_string())
      details.message = inner->get<std::string>();
  }
  if (!error->is_object()) return details;
  const auto text = [](const nlohmann::json& value) -> std::string {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_null()) return {};
    return value.dump();
  };
  if (const auto type = error->find("type"); type != error->end() && text(*type) != "error") details.type = text(*type);
  if (const auto code = error->find("code"); code != error->end()) {
    if (code->is_number_integer())
      details.numeric_code = static_cast<int>(std::clamp<std::int64_t>(code->get<std::int64_t>(), -1, 999));
    else
      details.code = text(*code);
  }
  if (const auto message = error->find("message"); message != error->end())
    details.message = text(*message);
  else if (const auto detail = body.find("detail"); detail != body.end())
    details.message = text(*detail);
  if (const auto extra = error->find("details"); extra != error->end() && extra->is_object())
    details.detail_code = string_field(*extra, "error_code");
  return details;
}

[[nodiscard]] inline ErrorDetails error_details(std::string_view body) {
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (!json.is_discarded() && json.is_object()) return error_details(json);
  ErrorDetails details;
  details.message = std::string(trim_http_whitespace(body.substr(0, 2000)));
  return details;
}

/// Whether an error says that the prompt does not fit the model's context window. Each
/// server words it differently; llama-server's type is stable, its text is not.
[[nodiscard]] inline bool is_context_overflow(const ErrorDetails& error) {
  for (const std::string& token : {error.type, error.code})
    if (token == "context_length_exceeded" || token == "exceed_context_size_error" ||
        token == "model_context_window_exceeded")
      return true;
  const std::string message = lowercase_ascii(error.message);
  for (const std::string_view phrase : {"maximum context length",                  // OpenAI, vLLM
                                        "context length exceeded",                 // generic
                                        "prompt is too long",                      // Anthropic
                                        "exceeds the available context size",      // llama-server
                                        "exceed_context_size",                     // llama-server (type in text)
                                        "longer than the model's context length",  // SGLang
                                        "input is too long",                       // Bedrock-style gateways
                                        "exceeds the context window",              // generic
                                        "reduce the length of the messages"})      // OpenAI
    if (message.find(phrase) != std::string::npos) return true;
  return false;
}

/// Whether an error says that retrying cannot help: credentials, permissions, an
/// exhausted quota or a spend limit.
[[nodiscard]] inline bool is_account_failure(const ErrorDetails& error) {
  for (const std::string& token : {error.type, error.code, error.detail_code})
    for (const std::string_view fatal : {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active",
                                         "access_terminated", "invalid_api_key", "authentication_error",
                                         "permission_error", "permission_denied", "enforced_spend_limit_reached"})
      if (token == fatal) return true;
  const std::string message = lowercase_ascii(error.message);
  for (const std::string_view phrase : {"exceeded your current quota", "spend limit", "credit balance is too low",
                                        "insufficient credits", "insufficient balance"})
    if (message.find(phrase) != std::string::npos) return true;
  return false;
}

[[nodiscard]] inline std::string describe(const ErrorDetails& error) {
  std::string text;
  for (const std::string& token : {error.type, error.code, error.detail_code})
    if (!token.empty() && text.find(token) == std::string::npos) text += (text.empty() ? "" : "/") + token;
  if (!error.message.empty()) text += (text.empty() ? "" : ": ") + error.message;
  return text.empty() ? "(no error message)" : text;
}

// --- retry-after ------------------------------------------------------------------------------

/// Reads an IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`), the form `retry-after`
/// dates take.
[[nodiscard]] inline std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
  text = trim_http_whitespace(text);
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  text = trim_http_whitespace(text.substr(comma + 1));  // "21 Oct 2015 07:28:00 GMT"
  if (text.size() < 24 || text.substr(text.size() - 3) != "GMT") return std::nullopt;
  const auto number = [&](std::size_t at, std::size_t digits) -> std::optional<int> {
    int value = 0;
    for (std::size_t i = at; i < at + digits; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
      value = value * 10 + (text[i] - '0');
    }
    return value;
  };
  static constexpr std::string_view months = "JanFebMarAprMayJunJulAugSepOctNovDec";
  const auto month_at = months.find(text.substr(3, 3));
  const auto day = number(0, 2), year = number(7, 4), hour = number(12, 2), minute = number(15, 2),
             second = number(18, 2);
  if (month_at == std::string_view::npos || month_at % 3 != 0 || !day || !year || !hour || !minute || !second)
    return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year{*year},
                                         std::chrono::month{static_cast<unsigned>(month_at / 3 + 1)},
                                         std::chrono::day{static_cast<unsigned>(*day)}};
  if (!date.ok() || *hour > 23 || *minute > 59 || *second > 60) return std::nullopt;
  return std::chrono::sys_days{date} + std::chrono::hours{*hour} + std::chrono::minutes{*minute} +
         std::chrono::seconds{*second};
}

/// The delay a response asks for: `retry-after-ms` (milliseconds, possibly
/// fractional), else `retry-after` (seconds, or an HTTP date relative to `now`).
[[nodiscard]] inline std::optional<std::chrono::milliseconds> retry_after(
    const HttpHeaders& headers, std::chrono::system_clock::time_point now = std::chrono::system_clock::now()) {
  const auto number = [](std::string_view text) -> std::optional<double> {
    text = trim_http_whitespace(text);
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);  // locale-independent
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
      return std::nullopt;
    return value;
  };
  if (const auto ms = headers.find("retry-after-ms"); ms != headers.end())
    if (const auto value = number(ms->second))
      return std::chrono::milliseconds(static_cast<std::int64_t>(std::clamp(*value, -1.0, 1e12)));
  if (const auto after = headers.find("retry-after"); after != headers.end()) {
    if (const auto seconds = number(after->second))
      return std::chrono::milliseconds(static_cast<std::int64_t>(std::clamp(*seconds, -1.0, 1e9) * 1000.0));
    if (const auto date = parse_http_date(after->second))
      return std::chrono::duration_cast<std::chrono::milliseconds>(*date - now);
  }
  return std::nullopt;
}

// --- classification ---------------------------------------------------------------------------

/// Turns an HTTP error response into a failure the retry loop and the agent loop act on.
/// `origin` names the backend in the message (e.g. "openai:gpt-4.1").
/// `auth_hint` is appended to authentication and permission failures (where the key
/// came from, what to check).
[[nodiscard]] inline LlmFailure classify_http_error(int status, const HttpHeaders& headers, std::string_view body,
                                                    std::string_view origin, std::string_view auth_hint = {}) {
  const ErrorDetails error = error_details(body);
  std::string message = std::string(origin) + ": HTTP " + std::to_string(status) + ": " + describe(error);
  for (const char* id_header : {"x-request-id", "request-id"})
    if (const auto id = headers.find(id_header); id != headers.end()) {
      message += " (request id " + id->second + ")";
      break;
    }
  const auto delay = retry_after(headers);

  LlmErrorKind kind;
  if (status == 401 || status == 402 || status == 403 || is_account_failure(error)) {
    kind = LlmErrorKind::fatal;
    if ((status == 401 || status == 403) && !auth_hint.empty()) message += "; " + std::string(auth_hint);
  } else if ((status == 400 || status == 413 || status == 422) && (status == 413 || is_context_overflow(error))) {
    kind = LlmErrorKind::context_overflow;
  } else if (status == 408 || status == 409 || status == 429 || status >= 500) {
    kind = LlmErrorKind::retriable;
  } else if (status >= 400) {
    kind = LlmErrorKind::invalid_request;
    if (status == 404) message += "; check the model name and the base URL";
  } else {
    kind = LlmErrorKind::invalid_response;
  }
  LlmFailure failure(kind, message, status, delay);
  // The server's own verdict on retrying wins, except where retrying cannot help.
  if (const auto should = headers.find("x-should-retry");
      should != headers.end() && kind != LlmErrorKind::fatal && kind != LlmErrorKind::context_overflow) {
    if (should->second == "true") failure.set_retry(true);
    if (should->second == "false") failure.set_retry(false);
  }
  return failure;
}

/// Classifies an error that arrived inside a 200 response or a stream (vLLM's `data:
/// {"error": ...}`, Anthropic's `event: error`). Without a status of its own it is taken
/// for a server-side failure, retriable unless its content says otherwise.
[[nodiscard]] inline LlmFailure classify_error_event(const nlohmann::json& body, std::string_view origin) {
  const ErrorDetails error = error_details(body);
  const int status = (error.numeric_code >= 400 && error.numeric_code < 600) ? error.numeric_code : 500;
  const std::string message = std::string(origin) + ": error inside the response: " + describe(error);
  if (is_account_failure(error)) return LlmFailure(LlmErrorKind::fatal, message, status);
  if (is_context_overflow(error)) return LlmFailure(LlmErrorKind::context_overflow, message, status);
  if (error.type == "overloaded_error" || error.type == "rate_limit_error" || error.type == "api_error" ||
      status == 408 || status == 409 || status == 429 || status >= 500)
    return LlmFailure(LlmErrorKind::retriable, message, status);
  return LlmFailure(LlmErrorKind::invalid_request, message, status);
}

// --- backoff and the retry loop -----------------------------------------------------------------

/// The computed wait before retry `retry_index` (0-based): capped exponential backoff,
/// scaled into `[1 - jitter, 1]` by `unit_random` (uniform in [0, 1)).
[[nodiscard]] inline std::chrono::milliseconds backoff_delay(const RetryPolicy& policy, int retry_index,
                                                             double unit_random) {
  const double initial = static_cast<double>(policy.initial_backoff.count());
  const double cap = static_cast<double>(policy.max_backoff.count());
  const double base = std::min(cap, initial * std::pow(2.0, std::clamp(retry_index, 0, 62)));
  const double jitter = std::clamp(policy.jitter, 0.0, 1.0);
  const double scaled = base * (1.0 - jitter * std::clamp(unit_random, 0.0, 1.0));
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::max(0.0, scaled)));
}

/// The wait before the next attempt after `failure`, and whether the server chose it.
[[nodiscard]] inline std::pair<std::chrono::milliseconds, bool> retry_delay(const RetryPolicy& policy,
                                                                            const LlmFailure& failure, int retry_index,
                                                                            double unit_random) {
  if (const auto requested = failure.retry_after();
      requested && requested->count() > 0 && *requested <= policy.max_server_delay)
    return {*requested, true};
  return {backoff_delay(policy, retry_index, unit_random), false};
}

/// Waits for `delay` unless `stop` is requested first; returns whether it waited fully.
inline bool sleep_unless_stopped(std::chrono::milliseconds delay, const std::stop_token& stop) {
  std::mutex mutex;
  std::condition_variable_any wake;
  std::unique_lock lock(mutex);
  static_cast<void>(wake.wait_for(lock, stop, delay, [] { return false; }));
  return !stop.stop_requested();
}

/// Calls `attempt(attempt_index)` until it returns, retrying `LlmFailure`s that allow it
/// with the policy's delays. A failure that may not be retried, or the last one, is
/// thrown as an `LlmError` that counts the attempts. A stop request ends the wait with
/// `LlmError{cancelled}`. Other exceptions pass through untouched.
template <class Attempt>
auto with_retries(const TransportOptions& options, const std::stop_token& stop, Attempt&& attempt)
    -> decltype(attempt(0)) {
  std::mt19937_64 random(std::random_device{}());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int max_retries = std::max(0, options.retry.max_retries);
  for (int index = 0;; ++index) {
    if (stop.stop_requested()) throw LlmError(LlmErrorKind::cancelled, "the LLM call was cancelled", 0, index);
    try {
      return attempt(index);
    } catch (const LlmFailure& failure) {
      const int attempts = index + 1;
      if (!failure.retry() || index >= max_retries) {
        std::string message = failure.what();
        if (attempts > 1) message += " (gave up after " + std::to_string(attempts) + " attempts)";
        throw LlmError(failure.kind(), message, failure.http_status(), attempts);
      }
      const auto [delay, server_requested] = retry_delay(options.retry, failure, index, unit(random));
      if (options.on_retry)
        options.on_retry(RetryNotice{attempts, delay, server_requested, failure.what(), failure.http_status()});
      if (!sleep_unless_stopped(delay, stop))
        throw LlmError(LlmErrorKind::cancelled, "the LLM call was cancelled while waiting to retry", 0, attempts);
    }
  }
}

}  // namespace cuda_agent::detail
