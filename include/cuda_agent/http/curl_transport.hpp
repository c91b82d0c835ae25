// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The libcurl transport under the HTTP LLM clients: one POST per attempt, streamed
/// bodies delivered as they arrive, connect / idle / total deadlines, cancellation
/// through a `std::stop_token`, TLS and proxy settings, and connection reuse.
///
/// libcurl's global state. `curl_global_init` must run before libcurl is used and
/// `curl_global_cleanup` once per successful init; both are reference-counted inside
/// libcurl. Each `CurlTransport` holds one reference for its lifetime, so nothing of
/// ours is global. libcurl 7.84 or newer built thread-safe (it reports
/// `CURL_VERSION_THREADSAFE`; Debian 12 and Ubuntu 24.04 ship such builds) allows these
/// calls from any thread. With an older libcurl, call `curl_global_init(CURL_GLOBAL_DEFAULT)`
/// once in `main` before starting threads: the transports' own calls then only move the
/// reference count. `CurlTransport::thread_safe_global_init()` says which case applies.
///
/// Threads. A transport keeps a small pool of libcurl handles behind a mutex: one
/// object may serve several threads at once, each call taking its own handle, and
/// connections are reused across calls.

#include <curl/curl.h>

#include <algorithm>    // min, max
#include <chrono>       // steady_clock, milliseconds
#include <cstddef>      // size_t
#include <cstdlib>      // atoi, getenv
#include <exception>    // exception_ptr, current_exception, rethrow_exception
#include <functional>   // function
#include <memory>       // unique_ptr
#include <mutex>        // mutex, lock_guard
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <stop_token>   // stop_token, stop_callback
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move, pair
#include <vector>       // vector

#include "cuda_agent/llm/detail/llm_failure.hpp"
#include "cuda_agent/llm/detail/sse_parser.hpp"
#include "cuda_agent/llm/llm_transport.hpp"
#include "cuda_agent/message.hpp"

namespace cuda_agent::http {

/// Joins a base URL and an endpoint path: a trailing slash is dropped, and a URL that
/// names only a host gets the conventional `/v1`.
[[nodiscard]] inline std::string endpoint_url(std::string base, std::string_view path) {
  while (!base.empty() && base.back() == '/') base.pop_back();
  const auto scheme = base.find("://");
  const bool host_only = scheme != std::string::npos && base.find('/', scheme + 3) == std::string::npos;
  if (host_only) base += "/v1";
  return base + std::string(path);
}

/// The API key a client uses: the explicit one, else the environment's, else the
/// placeholder. Throws `LlmError{fatal}` naming the variable when a required key is
/// missing.
[[nodiscard]] inline std::string resolve_api_key(const std::optional<std::string>& explicit_key,
                                                 const std::string& variable, bool required,
                                                 std::string_view placeholder, std::string_view backend) {
  if (explicit_key) return *explicit_key;
  if (!variable.empty())
    if (const char* value = std::getenv(variable.c_str()); value && *value) return value;
  if (required)
    throw LlmError(LlmErrorKind::fatal, std::string(backend) + " needs an API key: set the environment variable " +
                                            variable + " (or pass the key in the client options)");
  return std::string(placeholder);
}

/// What came back from one POST (any status).
struct HttpResult {
  int status = 0;
  detail::HttpHeaders headers;
  /// Error bodies (the first MiB), and whole bodies of non-streamed answers.
  std::string body;
};

/// Receives the body of a 2xx response as it arrives, with the response headers.
using BodySink = std::function<void(std::string_view bytes, const detail::HttpHeaders& headers)>;

class CurlTransport {
 public:
  explicit CurlTransport(TransportOptions options = {}) : state_(std::make_unique<State>(std::move(options))) {}

  [[nodiscard]] const TransportOptions& options() const noexcept { return state_->options; }

  /// Whether this libcurl allows `curl_global_init` from any thread (see the file comment).
  [[nodiscard]] static bool thread_safe_global_init() noexcept {
#ifdef CURL_VERSION_THREADSAFE
    return (curl_version_info(CURLVERSION_NOW)->features & CURL_VERSION_THREADSAFE) != 0;
#else
    return false;
#endif
  }

  /// POSTs `body` to `url`. With `sink`, a 2xx body goes to it piece by piece (and the
  /// idle deadline applies between pieces); without, it is returned whole.
  ///
  /// Throws `detail::LlmFailure` for transport failures (retriable: refused or reset
  /// connections, deadlines; fatal: certificate problems, bad URLs),
  /// `LlmError{cancelled}` when `stop` fires, and whatever `sink` threw.
  [[nodiscard]] HttpResult post(const std::string& url, const std::vector<std::string>& headers,
                                const std::string& body, const BodySink& sink, const std::stop_token& stop,
                                std::string_view origin) const {
    Lease lease(*state_);
    Transfer transfer{sink, {}, {}, std::chrono::steady_clock::now()};
    HeaderList header_list(headers);
    char error_buffer[CURL_ERROR_SIZE] = {};
    configure(lease.easy(), url, header_list.get(), body, transfer, error_buffer);

    const Outcome outcome = run(lease, transfer, sink != nullptr, stop);
    if (transfer.error) std::rethrow_exception(transfer.error);
    if (outcome == Outcome::cancelled) throw LlmError(LlmErrorKind::cancelled, std::string(origin) + ": cancelled");
    const auto& timeouts = state_->options.timeouts;
    if (outcome == Outcome::idle)
      throw detail::LlmFailure(LlmErrorKind::retriable, std::string(origin) + ": no data for " +
                                                            seconds(timeouts.idle) +
                                                            " (idle timeout); gave up on the connection");
    if (lease.code() != CURLE_OK) throw transport_failure(lease.code(), error_buffer, lease.easy(), origin);
    return std::move(transfer.result);
  }

 private:
  /// One reference on libcurl's global state (see the file comment).
  struct CurlGlobal {
    CurlGlobal() {
      if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("curl_global_init failed");
    }
    ~CurlGlobal() { curl_global_cleanup(); }
    CurlGlobal(const CurlGlobal&) = delete;
    CurlGlobal& operator=(const CurlGlobal&) = delete;
  };

  struct Handles {
    Handles() : multi(curl_multi_init()), easy(curl_easy_init()) {
      if (!multi || !easy) throw std::runtime_error("libcurl could not allocate a handle");
    }
    ~Handles() {
      curl_easy_cleanup(easy);
      curl_multi_cleanup(multi);
    }
    Handles(const Handles&) = delete;
    Handles& operator=(const Handles&) = delete;
    CURLM* multi;
    CURL* easy;
  };

  struct State {
    explicit State(TransportOptions transport_options) : options(std::move(transport_options)) {}
    CurlGlobal global;  // first in, last out
    TransportOptions options;
    std::mutex mutex;
    std::vector<std::unique_ptr<Handles>> idle;
  };

  /// A pair of handles taken from the pool for one call, returned (with its open
  /// connections) afterwards.
  class Lease {
   public:
    explicit Lease(State& state) : state_(state) {
      {
        const std::lock_guard lock(state_.mutex);
        if (!state_.idle.empty()) {
          handles_ = std::move(state_.idle.back());
          state_.idle.pop_back();
        }
      }
      if (!handles_) handles_ = std::make_unique<Handles>();
      curl_easy_reset(handles_->easy);
    }
    ~Lease() {
      if (added_) curl_multi_remove_handle(handles_->multi, handles_->easy);
      const std::lock_guard lock(state_.mutex);
      state_.idle.push_back(std::move(handles_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    [[nodiscard]] CURL* easy() const noexcept { return handles_->easy; }
    [[nodiscard]] CURLM* multi() const noexcept { return handles_->multi; }
    void added() noexcept { added_ = true; }
    [[nodiscard]] CURLcode code() const noexcept { return code_; }
    void set_code(CURLcode code) noexcept { code_ = code; }

   private:
    State& state_;
    std::unique_ptr<Handles> handles_;
    bool added_ = false;
    CURLcode code_ = CURLE_OK;
  };

  class HeaderList {
   public:
    explicit HeaderList(const std::vector<std::string>& headers) {
      for (const std::string& header : headers) append(header.c_str());
      append("Expect:");  // no 100-continue round trip for large prompts
    }
    ~HeaderList() { curl_slist_free_all(list_); }
    HeaderList(const HeaderList&) = delete;
    HeaderList& operator=(const HeaderList&) = delete;
    [[nodiscard]] curl_slist* get() const noexcept { return list_; }

   private:
    void append(const char* header) {
      curl_slist* grown = curl_slist_append(list_, header);
      if (!grown) throw std::bad_alloc();
      list_ = grown;
    }
    curl_slist* list_ = nullptr;
  };

  struct Transfer {
    const BodySink& sink;
    HttpResult result;
    std::exception_ptr error;
    std::chrono::steady_clock::time_point last_activity;
    std::size_t error_body_limit = std::size_t{1} << 20;
  };

  enum class Outcome { finished, cancelled, idle };

  static std::string seconds(std::chrono::milliseconds duration) {
    std::string text = std::to_string(static_cast<double>(duration.count()) / 1000.0);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text + " s";
  }

  static std::size_t on_header(char* buffer, std::size_t size, std::size_t count, void* user) {
    auto& transfer = *static_cast<Transfer*>(user);
    const std::size_t bytes = size * count;
    transfer.last_activity = std::chrono::steady_clock::now();
    const std::string_view line = detail::trim_http_whitespace(std::string_view(buffer, bytes));
    if (line.starts_with("HTTP/")) {  // a new status line (after 1xx, or a proxy's CONNECT answer)
      transfer.result.headers.clear();
      const auto space = line.find(' ');
      transfer.result.status =
          space == std::string_view::npos ? 0 : std::atoi(std::string(line.substr(space + 1, 3)).c_str());
    } else if (const auto colon = line.find(':'); colon != std::string_view::npos) {
      transfer.result.headers[detail::lowercase_ascii(detail::trim_http_whitespace(line.substr(0, colon)))] =
          std::string(detail::trim_http_whitespace(line.substr(colon + 1)));
    }
    return bytes;
  }

  static std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
    auto& transfer = *static_cast<Transfer*>(user);
    const std::size_t bytes = size * count;
    transfer.last_activity = std::chrono::steady_clock::now();
    const int status = transfer.result.status;
    try {
      if (status >= 200 && status < 300 && transfer.sink) {
        transfer.sink(std::string_view(data, bytes), transfer.result.headers);
      } else if ((status >= 200 && status < 300) || transfer.result.body.size() < transfer.error_body_limit) {
        transfer.result.body.append(data, bytes);
      }
    } catch (...) {
      // Exceptions must not cross libcurl's C frames: keep it, abort the transfer, rethrow later.
      transfer.error = std::current_exception();
      return CURL_WRITEFUNC_ERROR;
    }
    return bytes;
  }

  void configure(CURL* easy, const std::string& url, curl_slist* headers, const std::string& body, Transfer& transfer,
                 char* error_buffer) const {
    const TransportOptions& options = state_->options;
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, options.user_agent.c_str());
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: required with threads
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.timeouts.connect.count()));
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeouts.total.count()));
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &CurlTransport::on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &transfer);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &CurlTransport::on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);

    const TlsOptions& tls = options.tls;
    if (!tls.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, tls.ca_file.c_str());
    if (!tls.ca_path.empty()) curl_easy_setopt(easy, CURLOPT_CAPATH, tls.ca_path.c_str());
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, tls.verify_peer ? 1L : 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, tls.verify_host ? 2L : 0L);

    const ProxyOptions& proxy = options.proxy;
    if (!proxy.url.empty())
      curl_easy_setopt(easy, CURLOPT_PROXY, proxy.url.c_str());
    else if (!proxy.use_environment)
      curl_easy_setopt(easy, CURLOPT_PROXY, "");  // "" turns the environment off
    if (!proxy.no_proxy.empty()) curl_easy_setopt(easy, CURLOPT_NOPROXY, proxy.no_proxy.c_str());
  }

  Outcome run(Lease& lease, Transfer& transfer, bool streaming, const std::stop_token& stop) const {
    if (curl_multi_add_handle(lease.multi(), lease.easy()) != CURLM_OK)
      throw std::runtime_error("curl_multi_add_handle failed");
    lease.added();
    CURLM* multi = lease.multi();
    const std::stop_callback wake_on_stop(stop, [multi] { curl_multi_wakeup(multi); });
    const auto idle = state_->options.timeouts.idle;
    for (;;) {
      int running = 0;
      if (const CURLMcode code = curl_multi_perform(multi, &running); code != CURLM_OK)
        throw detail::LlmFailure(LlmErrorKind::retriable, std::string("libcurl: ") + curl_multi_strerror(code));
      if (running == 0) break;
      if (stop.stop_requested()) return Outcome::cancelled;
      auto wait = std::chrono::milliseconds(1000);
      if (streaming) {
        const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                                  transfer.last_activity);
        if (silent >= idle) return Outcome::idle;
        wait = std::min(wait, idle - silent);
      }
      curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::max<std::int64_t>(1, wait.count())), nullptr);
    }
    int left = 0;
    while (CURLMsg* message = curl_multi_info_read(multi, &left))
      if (message->msg == CURLMSG_DONE) lease.set_code(message->data.result);
    return Outcome::finished;
  }

  detail::LlmFailure transport_failure(CURLcode code, const char* error_buffer, CURL* easy,
                                       std::string_view origin) const {
    const std::string detail = error_buffer[0] ? error_buffer : curl_easy_strerror(code);
    const std::string prefix = std::string(origin) + ": ";
    switch (code) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_ISSUER_ERROR:
      case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        return detail::LlmFailure(LlmErrorKind::fatal,
                                  prefix + "TLS certificate problem: " + detail +
                                      ". Point TlsOptions::ca_file (or ca_path) at the CA that signed the server's "
                                      "certificate, or the spec option ca_file=...");
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        return detail::LlmFailure(LlmErrorKind::fatal, prefix + "bad URL: " + detail);
      case CURLE_OPERATION_TIMEDOUT: {
        curl_off_t connected = 0;
        curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connected);
        const auto& timeouts = state_->options.timeouts;
        return detail::LlmFailure(LlmErrorKind::retriable,
                                  prefix +
                                      (connected == 0 ? "could not connect within " + seconds(timeouts.connect)
                                                      : "no complete answer within " + seconds(timeouts.total)) +
                                      " (" + detail + ")");
      }
      default:
        // Refused, reset or dropped connections, name resolution, TLS handshakes, HTTP/2
        // stream errors: transient from here.
        return detail::LlmFailure(LlmErrorKind::retriable, prefix + "transport error: " + detail);
    }
  }

  std::unique_ptr<State> state_;
};

}  // namespace cuda_agent::http

namespace cuda_agent::detail {

/// A chat endpoint over HTTP with the transport policy applied: retries with backoff,
/// streamed or whole answers, errors classified. The HTTP clients differ only in what
/// they put in it and in the `Assembler` (a stream assembler with `on_event` and
/// `finish`) and `parse_whole` (for non-streamed answers) they call it with.
struct HttpChatEndpoint {
  /// Sets the headers every chat call sends: content type, accept, and the transport's
  /// extra headers; clients add their authentication. `key_source` says where the key
  /// came from, for authentication failures: an environment variable, or empty for a
  /// key passed in the options.
  HttpChatEndpoint(const TransportOptions& options, std::string endpoint_url, std::string origin, bool streaming,
                   const std::string& key_source)
      : transport(options),
        url(std::move(endpoint_url)),
        name(std::move(origin)),
        stream(streaming),
        auth_hint(key_source.empty() ? "check the API key passed in the client options"
                                     : "check the API key in $" + key_source) {
    headers = {"Content-Type: application/json", stream ? "Accept: text/event-stream" : "Accept: application/json"};
    for (const auto& [header, value] : options.headers) headers.push_back(header + ": " + value);
  }

  /// One chat turn. Streamed increments go to `request.on_delta`; when an attempt fails
  /// after showing some, the next attempt first sends a delta with `restarted` set.
  template <class Assembler, class ParseWhole>
  [[nodiscard]] ChatResponse call(const nlohmann::json& request_body, const ChatRequest& request,
                                  ParseWhole&& parse_whole) const {
    const std::string body = request_body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    bool shown = false;
    const std::function<void(const StreamDelta&)> forward = [&](const StreamDelta& delta) {
      shown = true;
      if (request.on_delta) request.on_delta(delta);
    };
    return with_retries(transport.options(), request.cancellation, [&](int attempt) -> ChatResponse {
      if (attempt > 0 && shown && request.on_delta) {
        StreamDelta restart;
        restart.restarted = true;
        request.on_delta(restart);
        shown = false;
      }
      Assembler assembler(name, forward);
      SseParser parser;
      std::optional<bool> event_stream;  // decided by the first body bytes' Content-Type
      std::string whole;
      http::BodySink sink;
      if (stream)
        sink = [&](std::string_view bytes, const HttpHeaders& response_headers) {
          if (!event_stream) {
            const auto type = response_headers.find("content-type");
            // Servers that ignore `stream` answer with JSON; missing types are taken for events.
            event_stream = type == response_headers.end() ||
                           lowercase_ascii(type->second).find("application/json") == std::string::npos;
          }
          if (*event_stream)
            parser.feed(bytes, [&](SseEvent&& event) { assembler.on_event(event); });
          else
            whole.append(bytes);
        };
      http::HttpResult result = transport.post(url, headers, body, sink, request.cancellation, name);
      if (result.status < 200 || result.status >= 300)
        throw classify_http_error(result.status, result.headers, result.body, name, auth_hint);
      if (stream && event_stream.value_or(true)) {
        parser.finish([&](SseEvent&& event) { assembler.on_event(event); });
        return assembler.finish();
      }
      const std::string& text = stream ? whole : result.body;
      const auto json = nlohmann::json::parse(text, nullptr, false);
      if (json.is_discarded())
        throw LlmFailure(LlmErrorKind::invalid_response,
                         name + ": the answer is not JSON: " + std::string(trim_http_whitespace(text.substr(0, 200))));
      return parse_whole(json, name);
    });
  }

  http::CurlTransport transport;
  std::string url;
  std::string name;
  bool stream;
  std::string auth_hint;
  std::vector<std::string> headers;
};

}  // namespace cuda_agent::detail
