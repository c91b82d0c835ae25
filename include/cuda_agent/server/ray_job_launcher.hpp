// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `RayJobLauncher`: worker processes as Ray jobs, through the Jobs REST API of a Ray
/// cluster's dashboard (component `server`, cpp-httplib; no Ray library is linked),
/// conforming to `WorkerLauncher`:
///   POST /api/jobs/                 {"entrypoint", "submission_id", "entrypoint_num_gpus",
///                                    "entrypoint_num_cpus", "runtime_env": {"env_vars"},
///                                    "metadata"}: starts a job
///   GET  /api/jobs/{submission_id}  its "status" (PENDING, RUNNING, SUCCEEDED, FAILED,
///                                    STOPPED) and "message"
///   POST /api/jobs/{submission_id}/stop
/// The entrypoint is a shell command: the launch's arguments are quoted one by one, after
/// `exec`, so that the job's process is the worker itself (Ray's stop signals reach it, and
/// the worker's exit status is the job's). Ray runs the entrypoint on a node with the
/// reserved resources and sets CUDA_VISIBLE_DEVICES to the GPUs it reserved.

#include <algorithm>  // min
#include <chrono>     // milliseconds
#include <cstddef>    // size_t
#include <stdexcept>  // runtime_error, invalid_argument
#include <string>     // string, to_string
#include <utility>    // move
#include <vector>     // vector

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/shell_command.hpp"

#include "cuda_agent/service/worker_launcher.hpp"

namespace cuda_agent {

struct RayJobLauncherOptions {
  /// The dashboard of the Ray cluster's head node, "http://HOST:PORT".
  std::string address = "http://127.0.0.1:8265";
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds read_timeout{30'000};
};

class RayJobLauncher {
  static constexpr const char* job_name_characters =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.";

 public:
  /// Throws std::invalid_argument for an address that is not "http://HOST[:PORT]" (or
  /// https:// where cpp-httplib was built with TLS).
  explicit RayJobLauncher(RayJobLauncherOptions options) : options_(std::move(options)) {
    std::string& address = options_.address;
    const bool http = address.rfind("http://", 0) == 0;
    const bool https = address.rfind("https://", 0) == 0;
    if (!http && !https)
      throw std::invalid_argument(
          "Ray's dashboard address must start with http:// (as in http://127.0.0.1:8265), not '" + address + "'");
    const std::size_t scheme = http ? 7 : 8;
    while (address.size() > scheme && address.back() == '/') address.pop_back();
    const std::string rest = address.substr(scheme);
    if (rest.empty() || rest.find('/') != std::string::npos)
      throw std::invalid_argument("Ray's dashboard address is http://HOST[:PORT], without a path: not '" + address +
                                  "'");
    if (!httplib::Client(address).is_valid())
      throw std::invalid_argument("Ray's dashboard address '" + address +
                                  "' cannot be used (https:// needs cpp-httplib built with OpenSSL)");
  }

  /// Submits `launch` as a job whose submission id is its name; returns that id.
  std::string submit(const WorkerLaunch& launch) {
    check_job_name(launch.name);
    if (launch.command.empty()) throw std::invalid_argument("the launch of " + launch.name + " has no command");
    nlohmann::json body = {{"entrypoint", detail::exec_shell_line(launch.command)},
                           {"submission_id", launch.name},
                           {"runtime_env", {{"env_vars", launch.environment}}},
                           {"metadata", launch.labels}};
    if (launch.gpus > 0) body["entrypoint_num_gpus"] = launch.gpus;
    if (launch.cpus > 0) body["entrypoint_num_cpus"] = launch.cpus;
    const nlohmann::json answer = call("POST", "/api/jobs/", body.dump());
    return answer.value("submission_id", launch.name);
  }

  /// How job `job` stands: PENDING is pending, RUNNING running; SUCCEEDED, FAILED and
  /// STOPPED are ended, and so is a job Ray does not know (its cluster was restarted). The
  /// message is Ray's status and, in parentheses, the first line of its message.
  LaunchStatus status(const std::string& job) {
    check_job_name(job);
    const Answer answer = request("GET", "/api/jobs/" + job, "");
    if (answer.status == 404) return {LaunchState::ended, "Ray knows no job " + job + " (was the cluster restarted?)"};
    const nlohmann::json body = checked(answer, "GET", "/api/jobs/" + job);
    const std::string state = body.value("status", std::string());
    std::string message = state;
    // A failed job's message ends with the tail of its log: the first line says why.
    if (const auto words = body.find("message"); words != body.end() && words->is_string() && !words->empty()) {
      std::string first = words->get<std::string>();
      first = first.substr(0, std::min(first.find('\n'), first.find(", last available logs")));
      message += " (" + first.substr(0, 400) + ")";
    }
    if (state == "PENDING") return {LaunchState::pending, message};
    if (state == "RUNNING") return {LaunchState::running, message};
    if (state == "SUCCEEDED" || state == "FAILED" || state == "STOPPED") return {LaunchState::ended, message};
    throw std::runtime_error("Ray reports job " + job + " as '" + state + "', a status this launcher does not know");
  }

  /// Asks Ray to stop job `job` (SIGTERM to its process, SIGKILL a few seconds later); a
  /// job Ray does not know is left as it is.
  void stop(const std::string& job) {
    check_job_name(job);
    const Answer answer = request("POST", "/api/jobs/" + job + "/stop", "");
    if (answer.status == 404) return;
    (void)checked(answer, "POST", "/api/jobs/" + job + "/stop");
  }

  [[nodiscard]] std::string describe() const { return "Ray at " + options_.address; }

  /// Ray's version, from GET /api/version: whether the address is a dashboard that offers
  /// the Jobs API (Ray installed without "ray[default]" has no dashboard).
  std::string version() {
    const nlohmann::json answer = call("GET", "/api/version", "");
    return answer.value("ray_version", std::string("unknown"));
  }

 private:
  struct Answer {
    int status = 0;
    std::string body;
  };

  /// Ray's submission ids go in URL paths: letters, digits, '-', '_' and '.' only.
  static void check_job_name(const std::string& job) {
    if (job.empty() || job.size() > 200 || job.find_first_not_of(job_name_characters) != std::string::npos)
      throw std::invalid_argument("'" + job +
                                  "' is not a Ray submission id this launcher makes (letters, digits, -_.)");
  }

  Answer request(const std::string& method, const std::string& path, const std::string& body) {
    httplib::Client client(options_.address);
    client.set_connection_timeout(options_.connect_timeout);
    client.set_read_timeout(options_.read_timeout);
    client.set_write_timeout(options_.read_timeout);
    const httplib::Result result =
        method == "GET" ? client.Get(path) : client.Post(path, body, body.empty() ? "text/plain" : "application/json");
    if (!result)
      throw std::runtime_error("cannot reach Ray's dashboard at " + options_.address + " (" + method + " " + path +
                               "): " + httplib::to_string(result.error()) +
                               "; is the cluster up, and was it started with the dashboard (ray[default])?");
    return {result->status, result->body};
  }

  nlohmann::json call(const std::string& method, const std::string& path, const std::string& body) {
    return checked(request(method, path, body), method, path);
  }

  /// The answer's JSON, or std::runtime_error with Ray's reason: its error bodies are plain
  /// text, often a Python traceback whose last line says what went wrong.
  [[nodiscard]] nlohmann::json checked(const Answer& answer, const std::string& method, const std::string& path) const {
    nlohmann::json body = nlohmann::json::parse(answer.body, nullptr, false);
    if (answer.status == 200 && body.is_object()) return body;
    std::string reason = answer.body;
    while (!reason.empty() && (reason.back() == '\n' || reason.back() == '\r' || reason.back() == ' '))
      reason.pop_back();
    if (const auto line = reason.rfind('\n'); line != std::string::npos) reason = reason.substr(line + 1);
    if (reason.size() > 400) reason = reason.substr(0, 400);
    if (answer.status == 200) reason = "an answer that is not a JSON object: " + reason;
    throw std::runtime_error("Ray's dashboard at " + options_.address + " answered " + std::to_string(answer.status) +
                             " to " + method + " " + path + ": " + reason);
  }

  RayJobLauncherOptions options_;
};

static_assert(WorkerLauncher<RayJobLauncher>);

}  // namespace cuda_agent
