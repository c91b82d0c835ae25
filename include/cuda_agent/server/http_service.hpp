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
/// With remote workers (`cuda-agent serve --accept-workers`), the routes of `cuda-agent
/// worker` (worker_protocol.hpp), which only worker tokens open:
///
///   POST   /v1/workers                     {"protocol", "name", "capacity", "description",
///                                          "environment"}: its id
///   POST   /v1/workers/{id}/heartbeat      the leases cancelled since
///   POST   /v1/workers/{id}/lease[?wait=S] {"max": N}: up to N requests, with their files
///   POST   /v1/workers/{id}/results        {"lease", "result"}: whether it counted
///   DELETE /v1/workers/{id}                it leaves; what it held goes to others
///   GET    /v1/workers                     the workers registered, quarantined or not (client tokens)
///
/// With an `EpisodeService`, multi-turn episodes for agents and RL trainers:
///
///   POST   /v1/episodes                    {"task": ..., "policy"?: ...}: id, SKILL.md, files, tool specs
///   GET    /v1/episodes/{id}               its tool calls, idle time, evaluation
///   POST   /v1/episodes/{id}/tools/{name}  the call's arguments in, the tool's result out
///   POST   /v1/episodes/{id}/finish[?wait=S]  trusted evaluation of the workspace
///   DELETE /v1/episodes/{id}               closes it, removing its files
///
/// and the same episodes as a NeMo-Gym resources server, the episode named by a cookie:
///
///   POST   /seed_session                   a data row holding "task": opens an episode
///   POST   /<tool>                         one route per tool (Bash, Read, Compile, ...)
///   POST   /verify                         the row and the agent's response in, the same
///                                          with "reward" out (after the evaluation finished)
///   POST   /close_session                  closes it
///
/// Every refusal is JSON: {"error": {"code": ..., "message": ...}} with its HTTP status.
/// Authentication: `Authorization: Bearer <token>`; each token is a client of the service
/// (its limits). A server that listens beyond loopback must have tokens; one on loopback
/// without tokens takes every request as client "local". A worker's results are trusted as
/// verdicts, so workers have tokens of their own (`worker_tokens`), which open the worker
/// routes and nothing else; a client's token never opens them. A server with client tokens
/// or beyond loopback takes remote workers only with worker tokens.

#include <algorithm>   // min
#include <chrono>      // seconds, milliseconds, steady_clock
#include <cstddef>     // size_t
#include <functional>  // function
#include <map>         // map
#include <memory>      // unique_ptr
#include <stdexcept>   // invalid_argument, runtime_error
#include <string>      // string, stod
#include <utility>     // move
#include <vector>      // vector

#include <sys/socket.h>  // listen, setsockopt, SOMAXCONN

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/service/episode_service.hpp"
#include "cuda_agent/service/evaluation_service.hpp"

namespace cuda_agent {

struct HttpServiceOptions {
  std::string host = "127.0.0.1";
  /// 0: any free port (`HttpService::port()` says which).
  int port = 8080;
  /// Bearer token -> client name. Required when `host` is not a loopback address.
  std::map<std::string, std::string> tokens;
  /// Bearer token -> worker name: the tokens of remote workers.
  std::map<std::string, std::string> worker_tokens;
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
  /// How the worker jobs this coordinator keeps stand (`WorkerFleet::status()`), shown in
  /// /healthz as "launched_workers"; called from the server's threads. Empty: none.
  std::function<nlohmann::json()> launched_workers;
};

/// Whether `host` names only this machine.
[[nodiscard]] inline bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

class HttpService {
 public:
  /// Throws std::invalid_argument for a server beyond loopback without tokens. With
  /// `episodes` (not owned), the episode routes too.
  HttpService(EvaluationService& service, HttpServiceOptions options, EpisodeService* episodes = nullptr)
      : service_(service), episodes_(episodes), options_(std::move(options)) {
    if (!is_loopback_host(options_.host) && options_.tokens.empty())
      throw std::invalid_argument("a service that listens on " + options_.host +
                                  " (beyond loopback) needs at least one bearer token");
    for (const auto& [token, client] : options_.tokens)
      if (token.size() < 16)
        throw std::invalid_argument("the token of client '" + client + "' is shorter than 16 characters");
    for (const auto& [token, worker] : options_.worker_tokens) {
      if (token.size() < 16)
        throw std::invalid_argument("the token of worker '" + worker + "' is shorter than 16 characters");
      if (options_.tokens.contains(token))
        throw std::invalid_argument("the token of worker '" + worker + "' is also a client's: give workers their own");
    }
    if (service_.takes_remote_workers() && options_.worker_tokens.empty() &&
        (!options_.tokens.empty() || !is_loopback_host(options_.host)))
      throw std::invalid_argument(
          "a service with client tokens, or beyond loopback, takes remote workers only with worker tokens");
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

  /// Who may call a route: clients with their tokens, anyone, or remote workers with theirs.
  enum class Access { client, open, worker };

  /// The client a request speaks for (401 without a known token where tokens are required).
  [[nodiscard]] std::string authenticate(const httplib::Request& request) const {
    if (options_.tokens.empty()) return "local";
    if (request.get_header_value("Authorization").rfind("Bearer ", 0) != 0)
      throw ServiceError(401, "unauthorized", "send a bearer token: Authorization: Bearer <token>");
    const std::string* client = holder_of_token(request, options_.tokens);
    if (client == nullptr) throw ServiceError(401, "unauthorized", "the bearer token is not one this server knows");
    return *client;
  }

  /// The worker a request speaks for: 401 without one of the worker tokens, 403 for a
  /// client's token. Without worker tokens (on loopback, without client tokens either:
  /// checked at construction) every request is the local worker's.
  [[nodiscard]] std::string authenticate_worker(const httplib::Request& request) const {
    if (options_.worker_tokens.empty()) return "local";
    if (const std::string* worker = holder_of_token(request, options_.worker_tokens)) return *worker;
    if (holder_of_token(request, options_.tokens) != nullptr)
      throw ServiceError(403, "not_a_worker", "a client's token does not open the worker routes");
    throw ServiceError(401, "unauthorized", "send a worker's bearer token: Authorization: Bearer <token>");
  }

  /// Who holds the request's bearer token among `tokens` (null when nobody does). Every
  /// token is compared whole, so the time taken says nothing of how much matched.
  [[nodiscard]] static const std::string* holder_of_token(const httplib::Request& request,
                                                          const std::map<std::string, std::string>& tokens) {
    const std::string header = request.get_header_value("Authorization");
    const std::string scheme = "Bearer ";
    if (header.rfind(scheme, 0) != 0) return nullptr;
    const std::string token = header.substr(scheme.size());
    const std::string* found = nullptr;
    for (const auto& [known, holder] : tokens)
      if (same_secret(known, token)) found = &holder;
    return found;
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
  httplib::Server::Handler guarded(Handler handler, Access access = Access::client) {
    return [this, handler = std::move(handler), access](const httplib::Request& request, httplib::Response& response) {
      try {
        const std::string client = access == Access::client   ? authenticate(request)
                                   : access == Access::worker ? authenticate_worker(request)
                                                              : std::string("local");
        handler(request, response, client);
      } catch (const ServiceError& error) {
        send_json(response, error.status(), error.body());
        if (error.status() == 401) response.set_header("WWW-Authenticate", "Bearer");
      } catch (const std::exception& error) {
        send_json(response, 500, ServiceError(500, "internal_error", error.what()).body());
      }
    };
  }

  /// The request's body as JSON (400 when it is not).
  [[nodiscard]] static nlohmann::json json_body(const httplib::Request& request) {
    nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
    if (body.is_discarded()) throw ServiceError(400, "invalid_json", "the request body is not valid JSON");
    return body;
  }

  static constexpr const char* episode_cookie = "cuda_agent_episode";

  /// The episode a NeMo-Gym request's cookie names (400 without one).
  [[nodiscard]] static std::string episode_of_cookie(const httplib::Request& request) {
    const std::string cookies = request.get_header_value("Cookie");
    const std::string key = std::string(episode_cookie) + "=";
    for (std::size_t at = 0; at < cookies.size();) {
      std::size_t end = cookies.find(';', at);
      if (end == std::string::npos) end = cookies.size();
      std::string pair = cookies.substr(at, end - at);
      pair.erase(0, pair.find_first_not_of(' '));
      if (pair.rfind(key, 0) == 0) return pair.substr(key.size());
      at = end + 1;
    }
    throw ServiceError(400, "no_session",
                       "no episode cookie: call POST /seed_session first and send back the cookie it sets");
  }

  void episode_routes() {
    httplib::Server& server = *server_;
    EpisodeService& episodes = *episodes_;
    server.Post("/v1/episodes", guarded([&episodes](const httplib::Request& request, httplib::Response& response,
                                                    const std::string& client) {
                  send_json(response, 201, episodes.open(json_body(request), client));
                }));
    server.Get(R"(/v1/episodes/([^/]+))", guarded([&episodes](const httplib::Request& request,
                                                              httplib::Response& response, const std::string& client) {
                 send_json(response, 200, episodes.status(request.matches[1], client));
               }));
    server.Delete(
        R"(/v1/episodes/([^/]+))",
        guarded([&episodes](const httplib::Request& request, httplib::Response& response, const std::string& client) {
          const std::string id = request.matches[1];
          episodes.close(id, client);
          send_json(response, 200, {{"id", id}, {"closed", true}});
        }));
    server.Post(
        R"(/v1/episodes/([^/]+)/tools/([^/]+))",
        guarded([&episodes](const httplib::Request& request, httplib::Response& response, const std::string& client) {
          const nlohmann::json arguments = request.body.empty() ? nlohmann::json::object() : json_body(request);
          send_json(response, 200, episodes.call_tool(request.matches[1], request.matches[2], arguments, client));
        }));
    server.Post(R"(/v1/episodes/([^/]+)/finish)",
                guarded([this, &episodes](const httplib::Request& request, httplib::Response& response,
                                          const std::string& client) {
                  const nlohmann::json answer = episodes.finish(request.matches[1], wait_of(request), client);
                  send_json(response, answer["evaluation"]["stage"] == "finished" ? 200 : 202, answer);
                }));

    // The NeMo-Gym face: the same episodes, named by a cookie.
    server.Post(
        "/seed_session",
        guarded([&episodes](const httplib::Request& request, httplib::Response& response, const std::string& client) {
          const nlohmann::json row = json_body(request);
          if (!row.is_object() || !row.contains("task"))
            throw ServiceError(400, "invalid_request",
                               "the data row must hold \"task\": {\"name\": ..., \"source\": ...}");
          nlohmann::json opening = {{"task", row["task"]}};
          for (const char* field : {"metadata", "policy"})
            if (row.contains(field)) opening[field] = row[field];
          const nlohmann::json episode = episodes.open(opening, client);
          response.set_header("Set-Cookie", std::string(episode_cookie) + "=" + episode["id"].get<std::string>() +
                                                "; Path=/; HttpOnly; SameSite=Strict");
          send_json(response, 200, {{"episode", episode["id"]}, {"tools", episode["tools"]}});
        }));
    server.Post("/verify", guarded([this, &episodes](const httplib::Request& request, httplib::Response& response,
                                                     const std::string& client) {
                  nlohmann::json body = json_body(request);
                  if (!body.is_object()) throw ServiceError(400, "invalid_request", "the body must be a JSON object");
                  const std::string id = episode_of_cookie(request);
                  body["reward"] = 0.0;
                  body["mask_sample"] = false;
                  body["episode"] = id;
                  // What is not the policy's doing is masked: the trainer leaves the sample out
                  // rather than score it, and its run goes on.
                  const auto mask = [&body](const std::string& kind, const std::string& reason) {
                    body["mask_sample"] = true;
                    body["failure_kind"] = "cuda_agent:" + kind;
                    body["failure_reason"] = reason;
                  };
                  nlohmann::json status;
                  try {
                    status = episodes.finish(id, options_.max_wait, client)["evaluation"];
                  } catch (const ServiceError& error) {
                    if (error.status() != 404 && error.status() != 503) throw;
                    mask(error.code(), error.what());
                    send_json(response, 200, body);
                    return;
                  }
                  body["evaluation"] = status;
                  if (status["stage"] != "finished")
                    mask("evaluation_pending",
                         "evaluation " + status["id"].get<std::string>() + " had not finished within the longest wait");
                  else if (status["outcome"] == "evaluated" && status["reward"].is_object())
                    body["reward"] = status["reward"].value("value", 0.0);
                  else
                    mask(status.value("outcome", std::string("unknown")), status.value("message", std::string()));
                  send_json(response, 200, body);
                }));
    server.Post("/close_session", guarded([&episodes](const httplib::Request& request, httplib::Response& response,
                                                      const std::string& client) {
                  episodes.close(episode_of_cookie(request), client);
                  send_json(response, 200, nlohmann::json::object());
                }));
    server.Post(
        R"(/([A-Za-z0-9_-]{1,64}))",
        guarded([&episodes](const httplib::Request& request, httplib::Response& response, const std::string& client) {
          const nlohmann::json arguments = request.body.empty() ? nlohmann::json::object() : json_body(request);
          nlohmann::json result = episodes.call_tool(episode_of_cookie(request), request.matches[1], arguments, client);
          // What NeMo-Gym hands the model: the text and whether it is an error.
          result.erase("metadata");
          send_json(response, 200, result);
        }));
  }

  void worker_routes() {
    httplib::Server& server = *server_;
    server.Post(
        "/v1/workers",
        guarded([this](const httplib::Request& request, httplib::Response& response,
                       const std::string&) { send_json(response, 200, service_.register_worker(json_body(request))); },
                Access::worker));
    server.Post(
        R"(/v1/workers/([^/]+)/heartbeat)",
        guarded([this](const httplib::Request& request, httplib::Response& response,
                       const std::string&) { send_json(response, 200, service_.worker_heartbeat(request.matches[1])); },
                Access::worker));
    server.Post(R"(/v1/workers/([^/]+)/lease)",
                guarded(
                    [this](const httplib::Request& request, httplib::Response& response, const std::string&) {
                      send_json(response, 200,
                                service_.lease(request.matches[1], json_body(request), wait_of(request)));
                    },
                    Access::worker));
    server.Post(R"(/v1/workers/([^/]+)/results)",
                guarded(
                    [this](const httplib::Request& request, httplib::Response& response, const std::string&) {
                      send_json(response, 200, service_.complete(request.matches[1], json_body(request)));
                    },
                    Access::worker));
    server.Delete(R"(/v1/workers/([^/]+))",
                  guarded(
                      [this](const httplib::Request& request, httplib::Response& response, const std::string&) {
                        send_json(response, 200, service_.deregister_worker(request.matches[1]));
                      },
                      Access::worker));
    server.Get("/v1/workers", guarded([this](const httplib::Request&, httplib::Response& response, const std::string&) {
                 send_json(response, 200, service_.workers());
               }));
  }

  void routes() {
    httplib::Server& server = *server_;
    server.Post(
        "/v1/evaluations",
        guarded([this](const httplib::Request& request, httplib::Response& response, const std::string& client) {
          const nlohmann::json body = json_body(request);
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
    if (episodes_ != nullptr) episode_routes();
    if (service_.takes_remote_workers()) worker_routes();
    server.Get("/healthz", guarded(
                               [this](const httplib::Request&, httplib::Response& response, const std::string&) {
                                 nlohmann::json health = service_.health();
                                 if (options_.launched_workers)
                                   health["launched_workers"] = options_.launched_workers();
                                 send_json(response, service_.draining() ? 503 : 200, health);
                               },
                               Access::open));
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
  EpisodeService* episodes_;
  HttpServiceOptions options_;
  std::unique_ptr<httplib::Server> server_;
  socket_t listening_socket_ = -1;
  int port_ = -1;
};

}  // namespace cuda_agent
