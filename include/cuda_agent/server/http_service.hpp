// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The evaluation service over HTTP/JSON (component `server`, cpp-httplib): what
/// `cuda-agent serve` runs.
///
///   POST   /v1/evaluations[?wait=S]        one request, or {"requests": [...]}; with wait,
///                                          answers once all finished or S seconds passed
///   GET    /v1/evaluations/{id}[?wait=S]   the status (evaluation_status.schema.json)
///   DELETE /v1/evaluations/{id}            cancels it
///   GET    /v1/evaluations/{id}/events     its progress as server-sent events, to the end
///   GET    /healthz                        whether it takes requests, its policy (no token)
///   GET    /metrics                        Prometheus text format
///
/// Every refusal is JSON: {"error": {"code": ..., "message": ...}} with its HTTP status.
/// Authentication: `Authorization: Bearer <token>`; each token is a client of the service
/// (its limits). A server that listens beyond loopback must have tokens; one on loopback
/// without tokens takes every request as client "local".

#include <algorithm>  // min
#include <chrono>     // seconds, milliseconds, steady_clock
#include <cstddef>    // size_t
#include <map>        // map
#include <memory>     // unique_ptr
#include <stdexcept>  // invalid_argument, runtime_error
#include <string>     // string, stod
#include <utility>    // move
#include <vector>     // vector

#include <sys/socket.h>  // listen, setsockopt, SOMAXCONN

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/service/evaluation_service.hpp"

namespace cuda_agent {

struct HttpServiceOptions {
  std::string host = "127.0.0.1";
  /// 0: any free port (`HttpService::port()` says which).
  int port = 8080;
  /// Bearer token -> client name. Required when `host` is not a loopback address.
  std::map<std::string, std::string> tokens;
  /// Bytes of a request body, at most (413 beyond).
  std::size_t max_body_bytes = 16U << 20U;
  /// Threads that answer requests; a stream of events holds one while it lasts.
  std::size_t threads = 64;
  /// The longest `?wait=` honoured.
  std::chrono::seconds max_wait{600};
  /// Requests one connection may carry before the server closes it.
  std::size_t keep_alive_requests = 10'000;
  /// How often an idle event stream sends a comment, so that proxies keep it open.
  std::chrono::milliseconds keep_alive{15'000};
};

/// Whether `host` names only this machine.
[[nodiscard]] inline bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

class HttpService {
 public:
  /// Throws std::invalid_argument for a server beyond loopback without tokens.
  HttpService(EvaluationService& service, HttpServiceOptions options)
      : service_(service), options_(std::move(options)) {
    if (!is_loopback_host(options_.host) && options_.tokens.empty())
      throw std::invalid_argument("a service that listens on " + options_.host +
                                  " (beyond loopback) needs at least one bearer token");
    for (const auto& [token, client] : options_.tokens)
      if (token.size() < 16)
        throw std::invalid_argument("the token of client '" + client + "' is shorter than 16 characters");
    server_ = std::make_unique<httplib::Server>();
    const std::size_t threads = std::max<std::size_t>(options_.threads, 2);
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_->set_payload_max_length(options_.max_body_bytes);
    // Small JSON answers: sent at once (Nagle's algorithm would hold each for the client's
    // delayed acknowledgement, about 40 ms), and a client keeps its connection.
    server_->set_tcp_nodelay(true);
    server_->set_socket_options([this](socket_t socket) {
      int on = 1;
      ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      listening_socket_ = socket;
    });
    server_->set_keep_alive_max_count(options_.keep_alive_requests);
    routes();
  }

  HttpService(const HttpService&) = delete;
  HttpService& operator=(const HttpService&) = delete;
  ~HttpService() { stop(); }

  /// Binds the address; the port it got (throws when it cannot bind).
  int bind() {
    if (options_.port == 0) {
      port_ = server_->bind_to_any_port(options_.host);
    } else {
      port_ = server_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
    }
    if (port_ < 0)
      throw std::runtime_error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                               " (in use, or not an address of this machine)");
    // cpp-httplib listens with a backlog of 5 unless built otherwise: a burst of clients
    // would find the queue full and have their connections dropped. Listening again on the
    // bound socket only lengthens its queue.
    if (listening_socket_ >= 0) ::listen(listening_socket_, SOMAXCONN);
    return port_;
  }

  /// Answers requests until `stop()`; binds first when `bind()` was not called.
  void run() {
    if (port_ < 0) bind();
    server_->listen_after_bind();
  }

  void stop() {
    if (server_) server_->stop();
  }

  [[nodiscard]] int port() const noexcept { return port_; }
  [[nodiscard]] bool running() const { return server_->is_running(); }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& client)>;

  static void send_json(httplib::Response& response, int status, const nlohmann::json& body) {
    response.status = status;
    response.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                         "application/json");
  }

  /// The client a request speaks for (401 without a known token where tokens are required).
  [[nodiscard]] std::string authenticate(const httplib::Request& request) const {
    if (options_.tokens.empty()) return "local";
    const std::string header = request.get_header_value("Authorization");
    const std::string scheme = "Bearer ";
    if (header.rfind(scheme, 0) != 0)
      throw ServiceError(401, "unauthorized", "send a bearer token: Authorization: Bearer <token>");
    const std::string token = header.substr(scheme.size());
    // Every token is compared whole, so the time taken says nothing of how much matched.
    const std::string* found = nullptr;
    for (const auto& [known, client] : options_.tokens)
      if (same_secret(known, token)) found = &client;
    if (found == nullptr) throw ServiceError(401, "unauthorized", "the bearer token is not one this server knows");
    return *found;
  }

  [[nodiscard]] static bool same_secret(const std::string& a, const std::string& b) {
    unsigned char difference = a.size() == b.size() ? 0 : 1;
    for (std::size_t i = 0; i < a.size(); ++i)
      difference |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    return difference == 0;
  }

  /// `?wait=` in seconds, bounded by `max_wait` (400 when it is no number).
  [[nodiscard]] std::chrono::milliseconds wait_of(const httplib::Request& request) const {
    if (!request.has_param("wait")) return std::chrono::milliseconds(0);
    const std::string text = request.get_param_value("wait");
    double seconds = 0;
    try {
      std::size_t used = 0;
      seconds = std::stod(text, &used);
      if (used != text.size() || !(seconds >= 0)) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      throw ServiceError(400, "invalid_parameter", "wait: expects seconds (a number from 0), not '" + text + "'");
    }
    const auto asked = std::chrono::milliseconds(static_cast<long long>(std::min(seconds, 1e9) * 1000));
    return std::min<std::chrono::milliseconds>(asked, options_.max_wait);
  }

  /// Wraps `handler`: authentication, and every exception as a JSON refusal.
  httplib::Server::Handler guarded(Handler handler, bool needs_token = true) {
    return [this, handler = std::move(handler), needs_token](const httplib::Request& request,
                                                             httplib::Response& response) {
      try {
        const std::string client = needs_token ? authenticate(request) : std::string("local");
        handler(request, response, client);
      } catch (const ServiceError& error) {
        send_json(response, error.status(), error.body());
        if (error.status() == 401) response.set_header("WWW-Authenticate", "Bearer");
      } catch (const std::exception& error) {
        send_json(response, 500, ServiceError(500, "internal_error", error.what()).body());
      }
    };
  }

  void routes() {
    httplib::Server& server = *server_;
    server.Post(
        "/v1/evaluations",
        guarded([this](const httplib::Request& request, httplib::Response& response, const std::string& client) {
          const nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
          if (body.is_discarded()) throw ServiceError(400, "invalid_json", "the request body is not valid JSON");
          const std::chrono::milliseconds wait = wait_of(request);
          nlohmann::json answer = service_.submit(body, client);
          bool all_finished = true;
          if (wait.count() > 0) {
            const auto until = std::chrono::steady_clock::now() + wait;
            for (nlohmann::json& status : answer["evaluations"]) {
              const auto left =
                  std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
              status = service_.wait(status["id"], std::max(left, std::chrono::milliseconds(0)));
            }
          }
          for (const nlohmann::json& status : answer["evaluations"])
            all_finished = all_finished && status["stage"] == "finished";
          send_json(response, all_finished ? 200 : 202, answer);
        }));
    server.Get(R"(/v1/evaluations/([^/]+))",
               guarded([this](const httplib::Request& request, httplib::Response& response, const std::string&) {
                 const std::string id = request.matches[1];
                 const std::chrono::milliseconds wait = wait_of(request);
                 send_json(response, 200, wait.count() > 0 ? service_.wait(id, wait) : service_.status(id));
               }));
    server.Delete(R"(/v1/evaluations/([^/]+))",
                  guarded([this](const httplib::Request& request, httplib::Response& response, const std::string&) {
                    send_json(response, 200, service_.cancel(request.matches[1]));
                  }));
    server.Get(R"(/v1/evaluations/([^/]+)/events)",
               guarded([this](const httplib::Request& request, httplib::Response& response, const std::string&) {
                 const std::string id = request.matches[1];
                 (void)service_.status(id);  // 404 before the stream starts
                 response.set_header("Cache-Control", "no-cache");
                 response.set_chunked_content_provider(
                     "text/event-stream",
                     [this, id, seen = std::size_t{0}](std::size_t, httplib::DataSink& sink) mutable {
                       EvaluationService::Progress progress;
                       try {
                         progress = service_.events(id, seen, options_.keep_alive);
                       } catch (const std::exception&) {
                         return false;  // forgotten meanwhile (the oldest results go first): end the stream
                       }
                       std::string text;
                       for (const nlohmann::json& event : progress.events)
                         text += "event: progress\ndata: " + event.dump() + "\n\n";
                       if (progress.events.empty() && !progress.finished) text = ": keep-alive\n\n";
                       seen += progress.events.size();
                       if (!sink.write(text.data(), text.size())) return false;
                       if (progress.finished) sink.done();
                       return true;
                     });
               }));
    server.Get("/healthz", guarded(
                               [this](const httplib::Request&, httplib::Response& response, const std::string&) {
                                 send_json(response, service_.draining() ? 503 : 200, service_.health());
                               },
                               /*needs_token=*/false));
    server.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& response, const std::string&) {
                 response.set_content(service_.metrics(), "text/plain; version=0.0.4");
               }));
    // What the routes above did not answer (no such route, a body over the limit).
    server.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
      if (!response.body.empty()) return;
      std::string code = "error";
      std::string message = "HTTP " + std::to_string(response.status);
      if (response.status == 404) {
        code = "not_found";
        message = "no route " + request.method + " " + request.path;
      } else if (response.status == 413) {
        code = "body_too_large";
        message = "the request body is larger than this server takes";
      } else if (response.status == 400) {
        code = "bad_request";
        message = "the request is not well-formed HTTP";
      }
      const int status = response.status;
      send_json(response, status, ServiceError(status, code, message).body());
    });
  }

  EvaluationService& service_;
  HttpServiceOptions options_;
  std::unique_ptr<httplib::Server> server_;
  socket_t listening_socket_ = -1;
  int port_ = -1;
};

}  // namespace cuda_agent
