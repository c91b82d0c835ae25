// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What a coordinator and its remote workers say to each other, whatever carries it: the
/// `CoordinatorLink` concept (the calls a worker makes), and the JSON of a registration, a
/// lease and a result, as `cuda-agent serve` and `cuda-agent worker` send them over HTTP.

#include <chrono>     // milliseconds
#include <concepts>   // same_as
#include <cstddef>    // size_t
#include <cstdint>    // int64_t
#include <map>        // map
#include <stdexcept>  // invalid_argument
#include <string>     // string
#include <vector>     // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/service/evaluation_pool.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// The coordinator refuses the worker for good (its token, or it takes no remote workers):
/// asking again cannot help.
class CoordinatorRefusal : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The calls a remote worker makes to its coordinator.
///
/// Required expressions, for `L& link`, `const WorkerRegistration& registration`, `const
/// std::string& worker` and `lease`, `std::size_t most`, `std::chrono::milliseconds wait`
/// and `const PoolResult& result`, each throwing `UnknownWorker` where the coordinator does
/// not know `worker` (lost, gone: register again), `CoordinatorRefusal` where it refuses
/// the worker for good, and any other exception where it could not be reached (try again):
///   - `link.register_worker(registration)` returns a `WorkerGrant`;
///   - `link.heartbeat(worker)` returns the leases of `worker` cancelled since (to stop);
///   - `link.lease(worker, most, wait)` returns up to `most` `WorkerLease`s, waiting up to
///     `wait` while there is none;
///   - `link.complete(worker, lease, result)` returns whether the result counted (false:
///     the lease was no longer the worker's, and the result was dropped);
///   - `link.deregister_worker(worker)` returns whether the coordinator knew the worker.
/// `EvaluationPool` conforms (a worker and its coordinator in one process); so does
/// `HttpCoordinatorLink` (`server/coordinator_link.hpp`).
///
/// A minimal conforming type (a coordinator that never has work):
/// @code{.cpp}
/// struct Idle {
///   cuda_agent::WorkerGrant register_worker(const cuda_agent::WorkerRegistration&) { return {"idle"}; }
///   std::vector<std::string> heartbeat(const std::string&) { return {}; }
///   std::vector<cuda_agent::WorkerLease> lease(const std::string&, std::size_t, std::chrono::milliseconds) {
///     return {};
///   }
///   bool complete(const std::string&, const std::string&, const cuda_agent::PoolResult&) { return false; }
///   bool deregister_worker(const std::string&) { return true; }
/// };
/// @endcode
template <class L>
concept CoordinatorLink = requires(L& link, const WorkerRegistration& registration, const std::string& worker,
                                   std::size_t most, std::chrono::milliseconds wait, const PoolResult& result) {
  { link.register_worker(registration) } -> std::same_as<WorkerGrant>;
  { link.heartbeat(worker) } -> std::same_as<std::vector<std::string>>;
  { link.lease(worker, most, wait) } -> std::same_as<std::vector<WorkerLease>>;
  { link.complete(worker, worker, result) } -> std::same_as<bool>;
  { link.deregister_worker(worker) } -> std::same_as<bool>;
};

static_assert(CoordinatorLink<EvaluationPool>);

/// The version of this protocol, which a registration carries as "protocol". 2: a worker
/// says its environment when it registers (a registration without "protocol" is 1).
inline constexpr int worker_protocol_version = 2;

inline void to_json(nlohmann::json& out, const WorkerRegistration& registration) {
  out = {{"protocol", worker_protocol_version},
         {"name", registration.name},
         {"capacity", registration.capacity},
         {"description", registration.description},
         {"environment", registration.environment}};
}

inline void from_json(const nlohmann::json& in, WorkerRegistration& registration) {
  registration.name = in.value("name", std::string());
  registration.capacity = in.value("capacity", std::size_t{1});
  registration.description = in.value("description", nlohmann::json::object());
  registration.environment = in.value("environment", std::string());
}

inline void to_json(nlohmann::json& out, const WorkerGrant& grant) {
  out = {{"worker", grant.worker},
         {"heartbeat_interval_ms", grant.heartbeat_interval.count()},
         {"timeout_ms", grant.timeout.count()}};
}

inline void from_json(const nlohmann::json& in, WorkerGrant& grant) {
  grant.worker = in.at("worker").get<std::string>();
  grant.heartbeat_interval = std::chrono::milliseconds(in.value("heartbeat_interval_ms", std::int64_t{10'000}));
  grant.timeout = std::chrono::milliseconds(in.value("timeout_ms", std::int64_t{30'000}));
}

inline void to_json(nlohmann::json& out, const WorkerLease& lease) {
  out = {{"lease", lease.lease},
         {"id", lease.id},
         {"task", {{"name", lease.task.name}, {"source", lease.task.reference_source}}},
         {"files", lease.files},
         {"policy", lease.policy},
         {"timing", lease.timing},
         {"priority", lease.priority},
         {"time_left_ms", lease.time_left ? nlohmann::json(lease.time_left->count()) : nlohmann::json(nullptr)}};
}

inline void from_json(const nlohmann::json& in, WorkerLease& lease) {
  lease.lease = in.at("lease").get<std::string>();
  lease.id = in.value("id", std::string());
  const nlohmann::json& task = in.at("task");
  lease.task.name = task.at("name").get<std::string>();
  lease.task.reference_source = task.at("source").get<std::string>();
  lease.files = in.at("files").get<std::map<std::string, std::string>>();
  lease.policy = in.value("policy", nlohmann::json::object());
  lease.timing = in.value("timing", true);
  lease.priority = in.value("priority", 0);
  lease.time_left.reset();
  if (const auto left = in.find("time_left_ms"); left != in.end() && left->is_number())
    lease.time_left = std::chrono::milliseconds(left->get<std::int64_t>());
}

inline void to_json(nlohmann::json& out, const PoolResult& result) {
  out = {{"id", result.id},
         {"outcome", to_string(result.outcome)},
         {"evaluation", result.evaluation ? nlohmann::json(*result.evaluation) : nlohmann::json(nullptr)},
         {"message", result.message},
         {"cached", result.cached},
         {"device", result.device},
         {"times_ms",
          {{"queued", result.queued_for.count()},
           {"building", result.building_for.count()},
           {"on_device", result.on_device_for.count()}}}};
}

/// Throws std::invalid_argument for an outcome it does not know.
inline void from_json(const nlohmann::json& in, PoolResult& result) {
  result.id = in.value("id", std::string());
  const std::string outcome = in.at("outcome").get<std::string>();
  bool known = false;
  for (const PoolOutcome each :
       {PoolOutcome::evaluated, PoolOutcome::infrastructure_error, PoolOutcome::cancelled, PoolOutcome::expired})
    if (outcome == to_string(each)) {
      result.outcome = each;
      known = true;
    }
  if (!known) throw std::invalid_argument("a result's outcome is '" + outcome + "', not one this library knows");
  result.evaluation.reset();
  if (const auto evaluation = in.find("evaluation"); evaluation != in.end() && evaluation->is_object())
    result.evaluation = evaluation->get<Evaluation>();
  result.message = in.value("message", std::string());
  result.cached = in.value("cached", false);
  result.device = in.value("device", std::string());
  const nlohmann::json times = in.value("times_ms", nlohmann::json::object());
  result.queued_for = std::chrono::milliseconds(times.value("queued", std::int64_t{0}));
  result.building_for = std::chrono::milliseconds(times.value("building", std::int64_t{0}));
  result.on_device_for = std::chrono::milliseconds(times.value("on_device", std::int64_t{0}));
}

}  // namespace cuda_agent
