// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `HttpCoordinatorLink`: a remote worker's calls to a `cuda-agent serve --accept-workers`
/// coordinator over HTTP (component `server`, cpp-httplib), conforming to `CoordinatorLink`.
/// Each call opens a connection of its own, so that the worker's threads (taking work,
/// sending results, heartbeats) never wait for one another.

#include <chrono>     // milliseconds, seconds
#include <cstddef>    // size_t
#include <stdexcept>  // runtime_error, invalid_argument
#include <string>     // string, to_string
#include <utility>    // move
#include <vector>     // vector

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/service/worker_protocol.hpp"

namespace cuda_agent {

struct HttpCoordinatorLinkOptions {
  /// "http://host:port" of the coordinator.
  std::string url;
  /// The worker token (empty: none, for a coordinator on loopback without tokens).
  std::string token;
  std::chrono::milliseconds connect_timeout{5'000};
  /// How long a call may take beyond the wait it asks for.
  std::chrono::milliseconds read_timeout{30'000};
};

class HttpCoordinatorLink {
 public:
  explicit HttpCoordinatorLink(HttpCoordinatorLinkOptions options) : options_(std::move(options)) {
    if (options_.url.rfind("http://", 0) != 0 && options_.url.rfind("https://", 0) != 0)
      throw std::invalid_argument("the coordinator's address must start with http:// or https://, not '" +
                                  options_.url + "'");
    while (!options_.url.empty() && options_.url.back() == '/') options_.url.pop_back();
  }

  WorkerGrant register_worker(const WorkerRegistration& registration) {
    return post("/v1/workers", registration, {}).get<WorkerGrant>();
  }

  std::vector<std::string> heartbeat(const std::string& worker) {
    return post("/v1/workers/" + worker + "/heartbeat", nlohmann::json::object(), {})
        .at("cancelled")
        .get<std::vector<std::string>>();
  }

  std::vector<WorkerLease> lease(const std::string& worker, std::size_t most, std::chrono::milliseconds wait) {
    const std::string path =
        "/v1/workers/" + worker + "/lease?wait=" + std::to_string(static_cast<double>(wait.count()) / 1000.0);
    return post(path, {{"max", most}}, wait).at("leases").get<std::vector<WorkerLease>>();
  }

  bool complete(const std::string& worker, const std::string& lease, const PoolResult& result) {
    return post("/v1/workers/" + worker + "/results", {{"lease", lease}, {"result", result}}, {})
        .at("counted")
        .get<bool>();
  }

  bool deregister_worker(const std::string& worker) {
    httplib::Client client = connect({});
    const httplib::Result answer = client.Delete("/v1/workers/" + worker);
    if (!answer)
      throw std::runtime_error("the coordinator " + options_.url + ": " + httplib::to_string(answer.error()));
    if (answer->status == 404) return false;
    (void)checked(*answer);
    return true;
  }

 private:
  [[nodiscard]] httplib::Client connect(std::chrono::milliseconds wait) const {
    httplib::Client client(options_.url);
    client.set_connection_timeout(options_.connect_timeout);
    client.set_read_timeout(options_.read_timeout + wait);
    client.set_write_timeout(options_.read_timeout);
    if (!options_.token.empty()) client.set_bearer_token_auth(options_.token);
    return client;
  }

  nlohmann::json post(const std::string& path, const nlohmann::json& body, std::chrono::milliseconds wait) {
    httplib::Client client = connect(wait);
    const httplib::Result answer = client.Post(path, body.dump(), "application/json");
    if (!answer)
      throw std::runtime_error("the coordinator " + options_.url + ": " + httplib::to_string(answer.error()));
    return checked(*answer);
  }

  /// The answer's JSON; UnknownWorker for a 404 "unknown_worker"; CoordinatorRefusal where
  /// asking again cannot help (a token refused, no remote workers taken there); otherwise
  /// std::runtime_error (with the coordinator's message).
  [[nodiscard]] nlohmann::json checked(const httplib::Response& answer) const {
    nlohmann::json body = nlohmann::json::parse(answer.body, nullptr, false);
    if (answer.status == 200 && !body.is_discarded()) return body;
    std::string code;
    std::string message = answer.body.substr(0, 300);
    if (!body.is_discarded() && body.contains("error")) {
      code = body["error"].value("code", "");
      message = body["error"].value("message", message);
    }
    if (answer.status == 404 && code == "unknown_worker") throw UnknownWorker(message);
    const std::string what = "the coordinator " + options_.url + " answered " + std::to_string(answer.status) +
                             (code.empty() ? "" : " " + code) + ": " + message;
    if (answer.status == 400 || answer.status == 401 || answer.status == 403 || answer.status == 404)
      throw CoordinatorRefusal(what);
    throw std::runtime_error("the coordinator " + options_.url + " answered " + std::to_string(answer.status) +
                             (code.empty() ? "" : " " + code) + ": " + message);
  }

  HttpCoordinatorLinkOptions options_;
};

static_assert(CoordinatorLink<HttpCoordinatorLink>);

}  // namespace cuda_agent
