// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// How HTTP LLM clients reach their server: retries, timeouts, TLS and proxies.
///
/// These are plain settings, shared by every HTTP backend (OpenAI-compatible and
/// Anthropic, in the `http` component). They live in the core so that a host can build
/// its configuration without linking libcurl.
///
/// Defaults suit a long agent episode against a remote API: a few retries with capped
/// exponential backoff, a server's `retry-after` honoured up to a minute, peer
/// verification on, proxies taken from the environment as curl reads them
/// (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`).

#include <chrono>      // milliseconds
#include <filesystem>  // path
#include <functional>  // function
#include <string>      // string
#include <utility>     // pair
#include <vector>      // vector

namespace cuda_agent {

/// When and how long to wait before asking again after a transient failure.
///
/// Retried: HTTP 408, 409, 429 (rate limits, not exhausted quotas), 5xx and 529,
/// connection failures and resets, stalled or cut streams, and answers without a usable
/// choice. The wait before retry `n` (0-based) is `min(initial_backoff * 2^n,
/// max_backoff)`, scaled by a random factor in `[1 - jitter, 1]` so that many clients do
/// not retry in lockstep. A server's `retry-after-ms` or `retry-after` (seconds or an
/// HTTP date) replaces that computation when it lies in `(0, max_server_delay]`; a
/// longer request is not waited out but treated like an absent one, as the OpenAI SDKs
/// do. `x-should-retry: true|false` overrides the decision for non-fatal errors.
struct RetryPolicy {
  /// Attempts after the first; 0 disables retrying.
  int max_retries = 4;
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{8'000};
  /// Fraction of the delay that is randomized, in [0, 1].
  double jitter = 0.25;
  std::chrono::milliseconds max_server_delay{60'000};
};

/// Deadlines of one attempt.
struct Timeouts {
  /// Establishing the TCP connection and the TLS session.
  std::chrono::milliseconds connect{15'000};
  /// Streaming only: the longest silence between two received pieces of the answer,
  /// counted from when the request was sent. Reasoning models can think for minutes
  /// before the first token, hence the generous default.
  std::chrono::milliseconds idle{300'000};
  /// The whole attempt, from connecting to the last byte.
  std::chrono::milliseconds total{1'800'000};
};

/// Certificate checks for HTTPS.
struct TlsOptions {
  /// A PEM bundle of trusted certificates; empty: the system's default bundle.
  std::filesystem::path ca_file;
  /// A directory of hashed certificates (as `openssl rehash` makes); empty: none.
  std::filesystem::path ca_path;
  /// Verify the server's certificate chain. Turning this off exposes the API key to
  /// anyone on the path; it exists for test servers with throwaway certificates.
  bool verify_peer = true;
  /// Verify that the certificate names the host.
  bool verify_host = true;
};

/// Which proxy requests go through.
struct ProxyOptions {
  /// An explicit proxy (`http://host:port`, `socks5h://host:port`, ...). Empty: decided
  /// by `use_environment`.
  std::string url;
  /// Hosts that bypass the proxy, comma-separated, as in `no_proxy`; empty: curl's
  /// reading of the `no_proxy` variable.
  std::string no_proxy;
  /// Without an explicit `url`, honour `http_proxy`, `https_proxy`, `all_proxy` and
  /// `no_proxy` from the environment (curl ignores upper-case `HTTP_PROXY` on purpose).
  /// false: connect directly.
  bool use_environment = true;
};

/// Reported before each retry, for progress displays and logs.
struct RetryNotice {
  /// The attempt that failed, 1-based.
  int attempt = 0;
  /// How long the client now waits.
  std::chrono::milliseconds delay{0};
  /// Whether the delay came from the server's `retry-after-ms` / `retry-after`.
  bool server_requested = false;
  /// What went wrong, in words.
  std::string reason;
  /// The HTTP status, or 0 for transport failures.
  int http_status = 0;
};

/// Everything about the transport of one HTTP client.
struct TransportOptions {
  RetryPolicy retry;
  Timeouts timeouts;
  TlsOptions tls;
  ProxyOptions proxy;
  /// Extra request headers (organization, project, routing), sent on every request.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string user_agent = "cuda-agent";
  /// Called before each retry's wait; must not throw.
  std::function<void(const RetryNotice&)> on_retry;
};

}  // namespace cuda_agent
