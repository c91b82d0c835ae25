// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The evaluation service: JSON requests in, JSON statuses out, over an `EvaluationPool`.
/// It is what `cuda-agent serve` puts behind HTTP (`server/http_service.hpp`), and it has no
/// HTTP in it, so that a host can embed it behind a transport of its own.
///
/// - Requests are checked against the JSON Schema shipped in
///   `resources/service/evaluation_request.schema.json` (embedded); a violation is a
///   `ServiceError` with status 400 that names the field.
/// - Every accepted request is written to a journal (`state_directory/journal.jsonl`,
///   synced to disk) before it is acknowledged, with the candidate's files inline; so is
///   every result. A service started on the same state directory answers for the results
///   and runs again what had not finished: nothing a client was told was accepted is lost.
/// - Each client (a name; `server/` maps bearer tokens to them) has a limit of unfinished
///   evaluations and an optional quota.
/// - `drain()` refuses new requests (status 503) and returns once the accepted ones finished.

#include <algorithm>           // all_of, count_if
#include <chrono>              // steady_clock, system_clock, milliseconds
#include <condition_variable>  // condition_variable
#include <cstddef>             // size_t
#include <cstdint>             // uint64_t
#include <deque>               // deque
#include <filesystem>          // path
#include <functional>          // function
#include <map>                 // map
#include <memory>              // unique_ptr, shared_ptr
#include <mutex>               // mutex, unique_lock, lock_guard
#include <optional>            // optional
#include <sstream>             // ostringstream
#include <stdexcept>           // invalid_argument, runtime_error
#include <string>              // string
#include <utility>             // move
#include <vector>              // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/evaluate/reward_policies.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/service/detail/journal.hpp"
#include "cuda_agent/service/detail/requests.hpp"
#include "cuda_agent/service/evaluation_pool.hpp"
#include "cuda_agent/service/service_error.hpp"
#include "cuda_agent/service/worker_protocol.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// Who sends requests, and how much of the service they may hold.
struct ServiceClient {
  std::string name = "local";
  /// Evaluations of this client accepted and not finished, at most.
  std::size_t max_in_flight = 256;
  /// Evaluations this client may submit while the service runs; 0: no limit.
  std::size_t quota = 0;
};

struct EvaluationServiceOptions {
  EvaluationPoolOptions pool;
  /// The journal and the candidates' files of unfinished requests. Required.
  std::filesystem::path state_directory;
  /// What the service evaluates with (tolerance profile, timing and its budget, library
  /// policy, reward, device): reported by `health()`, and the defaults of every request's
  /// policy (`EvaluationService::effective_policy` says what a request may choose), which
  /// the pool hands to the evaluators as an `EvaluationPolicy`. A field left out here is one
  /// no request may choose.
  nlohmann::json policy = {{"tolerance", "default"},
                           {"timing", true},
                           {"timing_budget", {{"seconds", 2.0}, {"max_rounds", 400}}},
                           {"libraries", LibraryPolicy{}},
                           {"reward", "milestone"},
                           {"device", "cpu"}};
  /// Turns an evaluation into its reward (the milestone reward unless the host says), for
  /// requests that keep the service's reward; the others get the library's policy they name.
  std::function<Reward(const Evaluation&)> reward = [](const Evaluation& evaluation) {
    return MilestoneReward{}.reward(evaluation);
  };
  /// Requests in one batch, at most.
  std::size_t max_batch = 256;
  /// Bytes of one candidate's files, at most.
  std::size_t max_candidate_bytes = 4U << 20U;
  /// Whether requests may name a task file or candidate directory on the server's host.
  /// Off by default: a client could otherwise make the service read any file it can.
  bool allow_host_paths = false;
  /// Known clients by name; any other name gets `default_client`'s limits.
  std::map<std::string, ServiceClient> clients;
  ServiceClient default_client;
  /// Finished results kept for GET, at most (the oldest are forgotten first).
  std::size_t max_results_kept = 100'000;
};

class EvaluationService {
 public:
  /// `builder` and `slot_evaluator` as `EvaluationPool` takes them. Reads the journal of
  /// `options.state_directory` and resubmits what had not finished.
  EvaluationService(EvaluationServiceOptions options, AnyStagedEvaluator builder,
                    EvaluationPool::SlotEvaluatorFactory slot_evaluator)
      : options_(std::move(options)) {
    if (options_.state_directory.empty())
      throw std::invalid_argument("EvaluationService needs a state directory (its journal lives there)");
    request_schema_ = detail::embedded_request_schema("evaluation_request.schema.json");
    // In full, so that a request's choices are checked against every field.
    if (const auto libraries = options_.policy.find("libraries"); libraries != options_.policy.end())
      *libraries = libraries->get<LibraryPolicy>();
    std::filesystem::create_directories(options_.state_directory / "candidates");
    const std::filesystem::path journal_path = options_.state_directory / "journal.jsonl";
    const std::vector<nlohmann::json> history = detail::Journal::read(journal_path);
    journal_ = std::make_unique<detail::Journal>(journal_path);

    EvaluationPoolOptions pool_options = options_.pool;
    auto forward = pool_options.on_event;
    pool_options.on_event = [this, forward](const PoolEvent& event) {
      on_pool_event(event);
      if (forward) forward(event);
    };
    pool_ = std::make_unique<EvaluationPool>(std::move(pool_options), std::move(builder), std::move(slot_evaluator));
    recover(history);
  }

  EvaluationService(const EvaluationService&) = delete;
  EvaluationService& operator=(const EvaluationService&) = delete;

  /// Stops the pool (what waits is cancelled in the pool, but stays unfinished in the
  /// journal, so a service started again on the same directory runs it).
  ~EvaluationService() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    pool_.reset();
  }

  /// Accepts one request or a batch (`{"requests": [...]}`): the statuses of the new
  /// evaluations as `{"evaluations": [...]}`. A batch is accepted whole or not at all.
  nlohmann::json submit(const nlohmann::json& body, const std::string& client_name = "local") {
    std::vector<nlohmann::json> requests;
    if (body.is_object() && body.contains("requests")) {
      const nlohmann::json& list = body["requests"];
      if (!list.is_array() || list.empty())
        throw ServiceError(400, "invalid_request", "requests must be a non-empty array of evaluation requests");
      if (body.size() != 1) throw ServiceError(400, "invalid_request", "a batch holds only \"requests\"");
      if (list.size() > options_.max_batch)
        throw ServiceError(413, "batch_too_large",
                           "a batch holds at most " + std::to_string(options_.max_batch) + " requests, not " +
                               std::to_string(list.size()));
      requests.assign(list.begin(), list.end());
    } else {
      requests.push_back(body);
    }
    std::vector<Prepared> prepared;
    prepared.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i)
      prepared.push_back(prepare(requests[i], requests.size() > 1 ? "requests[" + std::to_string(i) + "]" : ""));

    const ServiceClient client = client_named(client_name);
    // The files go to disk before the lock is taken, so that submitters do not queue behind
    // one another's writes; a request refused at admission leaves nothing behind.
    for (Prepared& each : prepared) {
      each.id = "ev-" + detail::random_hex(8);
      // A result the pool knows already is answered at once: no files, no sync.
      each.cached = pool_->cached_result(pool_request(each), each.files);
      if (!each.cached) write_files(each);
    }
    nlohmann::json statuses = nlohmann::json::array();
    std::uint64_t journaled = 0;
    try {
      std::unique_lock lock(mutex_);
      admit_and_start(lock, client, prepared, statuses, journaled);
    } catch (const ServiceError&) {
      std::error_code ignored;
      for (const Prepared& each : prepared) std::filesystem::remove_all(candidate_directory(each.id), ignored);
      throw;
    }
    // Acknowledged only once on disk; submitters that arrive together share one sync.
    journal_->sync_through(journaled);
    return {{"evaluations", std::move(statuses)}};
  }

  /// The status of evaluation `id` (404 when unknown).
  [[nodiscard]] nlohmann::json status(const std::string& id) const {
    const std::lock_guard lock(mutex_);
    return find(id).status;
  }

  /// The status of `id` once it finished, or after `timeout` as it is then.
  [[nodiscard]] nlohmann::json wait(const std::string& id, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    const Record* record = &find(id);
    changed_.wait_for(lock, timeout, [&] {
      record = &find(id);
      return record->finished;
    });
    return record->status;
  }

  /// The progress events of `id` after the first `seen` of them: waits up to `timeout` for
  /// one when there are none yet. `finished` says that no more will come.
  struct Progress {
    std::vector<nlohmann::json> events;
    bool finished = false;
  };
  [[nodiscard]] Progress events(const std::string& id, std::size_t seen, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    const Record* record = &find(id);
    changed_.wait_for(lock, timeout, [&] {
      record = &find(id);
      return record->events.size() > seen || record->finished || stopping_;
    });
    Progress progress;
    for (std::size_t i = seen; i < record->events.size(); ++i) progress.events.push_back(record->events[i]);
    progress.finished = record->finished && seen + progress.events.size() >= record->events.size();
    return progress;
  }

  /// Cancels `id`: its status after the cancel (404 unknown, 409 already finished).
  nlohmann::json cancel(const std::string& id) {
    {
      const std::lock_guard lock(mutex_);
      if (find(id).finished) throw ServiceError(409, "finished", "evaluation " + id + " has already finished");
    }
    pool_->cancel(id);
    return wait(id, std::chrono::milliseconds(0));
  }

  /// Whether the service takes requests, what it evaluates with, and its counts; with
  /// remote workers, the ones quarantined (`{"worker", "name", "why"}` each).
  [[nodiscard]] nlohmann::json health() const {
    const PoolCounters counters = pool_->counters();
    nlohmann::json quarantined = nullptr;
    if (options_.pool.remote_workers) {
      quarantined = nlohmann::json::array();
      for (const auto& [id, worker] : pool_->remote_workers())
        if (!worker.quarantined.empty())
          quarantined.push_back({{"worker", id}, {"name", worker.registration.name}, {"why", worker.quarantined}});
    }
    const std::lock_guard lock(mutex_);
    nlohmann::json slots = nlohmann::json::array();
    for (const PoolSlot& slot : options_.pool.slots) slots.push_back(slot.device_name());
    return {
        {"status", draining_ ? "draining" : "ok"},
        {"policy", options_.policy},
        {"slots", slots},
        {"unfinished", counters.unfinished()},
        {"max_pending", options_.pool.max_pending},
        {"device_memory_bytes", options_.pool.device_memory_bytes},
        {"remote_workers", options_.pool.remote_workers ? nlohmann::json(counters.workers) : nlohmann::json(nullptr)},
        {"quarantined_workers", std::move(quarantined)},
        {"recovered", recovered_}};
  }

  /// Counters in the Prometheus text format (version 0.0.4).
  [[nodiscard]] std::string metrics() const {
    const PoolCounters counters = pool_->counters();
    std::uint64_t accepted = 0;
    {
      const std::lock_guard lock(mutex_);
      accepted = accepted_total_;
    }
    std::ostringstream out;
    const auto family = [&](const char* name, const char* type, const char* help) {
      out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
    };
    family("cuda_agent_evaluations_accepted_total", "counter", "Evaluation requests accepted.");
    out << "cuda_agent_evaluations_accepted_total " << accepted << '\n';
    family("cuda_agent_evaluations_finished_total", "counter", "Evaluations finished, by outcome.");
    const std::pair<const char*, std::size_t> outcomes[] = {{"evaluated", counters.evaluated},
                                                            {"infrastructure_error", counters.infrastructure_errors},
                                                            {"cancelled", counters.cancelled},
                                                            {"expired", counters.expired}};
    for (const auto& [outcome, count] : outcomes)
      out << "cuda_agent_evaluations_finished_total{outcome=\"" << outcome << "\"} " << count << '\n';
    family("cuda_agent_evaluations_cache_hits_total", "counter", "Evaluations answered from the result cache.");
    out << "cuda_agent_evaluations_cache_hits_total " << counters.cache_hits << '\n';
    family("cuda_agent_evaluations_retried_alone_total", "counter",
           "Verifications that ran out of device memory beside other work and went again alone.");
    out << "cuda_agent_evaluations_retried_alone_total " << counters.retried_alone << '\n';
    family("cuda_agent_evaluations_admitted_alone_total", "counter",
           "Verifications that had their device to themselves: their task's memory was not known yet, or fits "
           "beside nothing.");
    out << "cuda_agent_evaluations_admitted_alone_total " << counters.admitted_alone << '\n';
    family("cuda_agent_evaluations_in_stage", "gauge", "Unfinished evaluations, by stage.");
    const std::pair<const char*, std::size_t> stages[] = {{"queued", counters.queued},
                                                          {"building", counters.building},
                                                          {"waiting_for_slot", counters.waiting_for_slot},
                                                          {"verifying", counters.verifying},
                                                          {"timing", counters.timing},
                                                          {"on_worker", counters.on_worker}};
    for (const auto& [stage, count] : stages)
      out << "cuda_agent_evaluations_in_stage{stage=\"" << stage << "\"} " << count << '\n';
    if (options_.pool.remote_workers) {
      family("cuda_agent_remote_workers", "gauge", "Remote workers registered.");
      out << "cuda_agent_remote_workers " << counters.workers << '\n';
      family("cuda_agent_evaluations_requeued_total", "counter",
             "Evaluations given back to the queue: their remote worker was lost, left, gave them back, was "
             "quarantined or failed them.");
      out << "cuda_agent_evaluations_requeued_total " << counters.requeued << '\n';
      family("cuda_agent_remote_workers_quarantined", "gauge",
             "Remote workers quarantined (given no requests) after infrastructure errors in a row.");
      out << "cuda_agent_remote_workers_quarantined " << counters.quarantined << '\n';
      family("cuda_agent_remote_workers_quarantined_total", "counter", "Remote workers quarantined since the start.");
      out << "cuda_agent_remote_workers_quarantined_total " << counters.quarantines << '\n';
    }
    family("cuda_agent_device_busy_seconds_total", "counter", "Time each device spent verifying or timing.");
    for (const auto& [device, busy] : counters.busy)
      out << "cuda_agent_device_busy_seconds_total{device=\"" << device << "\"} "
          << std::chrono::duration<double>(busy).count() << '\n';
    return out.str();
  }

  /// Refuses new requests from now on and returns once every accepted one has finished.
  void drain() {
    {
      const std::lock_guard lock(mutex_);
      draining_ = true;
    }
    pool_->close();
    // The pool is done once its last result is out; the service once it is journaled.
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      return std::all_of(records_.begin(), records_.end(), [](const auto& entry) { return entry.second.finished; });
    });
  }

  [[nodiscard]] bool draining() const {
    const std::lock_guard lock(mutex_);
    return draining_;
  }

  [[nodiscard]] const nlohmann::json& request_schema() const noexcept { return request_schema_; }

  /// The policy a request's `policy` asks for (`where`: the field it came from, as refusals
  /// name it), made whole with the service's own: what its evaluation uses, and part of its
  /// cache key, so that a request naming the defaults and one naming nothing are the same
  /// request. A request may choose its tolerance profile, its reward and its timing budget,
  /// forbid libraries the service allows (never allow more), and turn timing off; anything
  /// else it names must equal the service's. A refusal is a 400 that names the field.
  [[nodiscard]] nlohmann::json effective_policy(const nlohmann::json& requested,
                                                const std::string& where = "policy") const {
    detail::require_schema(request_schema_["properties"]["policy"], requested, where);
    nlohmann::json effective = options_.policy;
    for (const auto& [key, value] : requested.items()) {
      const std::string field = where + "." + key;
      const auto own = options_.policy.find(key);
      if (own == options_.policy.end())
        throw ServiceError(400, "unsupported_policy", field + ": this server does not let a request choose " + key);
      if (key == "libraries") {
        effective[key] = narrowed_libraries(*own, value, field);
      } else if (key == "timing_budget") {
        effective[key].update(value);
      } else {
        // What a request may choose for itself besides: its reward and tolerance, and no
        // timing (less work, never more).
        const bool its_own_choice = key == "reward" || key == "tolerance" || (key == "timing" && value == false);
        if (*own != value && !its_own_choice)
          throw ServiceError(
              400, "unsupported_policy",
              field + ": this server evaluates with " + key + " " + own->dump() + ", not " + value.dump());
        effective[key] = value;
      }
    }
    // 2 and 2.0 seconds are one budget, and one cache key.
    if (const auto budget = effective.find("timing_budget"); budget != effective.end() && budget->contains("seconds"))
      (*budget)["seconds"] = (*budget)["seconds"].get<double>();
    return effective;
  }

  /// Whether remote workers may take this service's requests (`EvaluationPoolOptions::remote_workers`).
  [[nodiscard]] bool takes_remote_workers() const noexcept { return options_.pool.remote_workers; }

  /// Remote workers: the routes' JSON over the pool's calls. A worker the pool does not know
  /// is a 404 "unknown_worker" (it registers again); a service without remote workers
  /// answers every call with a 404 "no_remote_workers".
  ///
  /// `{"protocol", "name", "capacity", "description", "environment"}` in; `{"worker",
  /// "heartbeat_interval_ms", "timeout_ms"}` out. A worker of another protocol version (one
  /// from before workers said their environment) is refused: 400 "unsupported_protocol".
  nlohmann::json register_worker(const nlohmann::json& body) {
    needs_remote_workers();
    WorkerRegistration registration;
    int protocol = 1;
    try {
      protocol = body.value("protocol", 1);
      registration = body.get<WorkerRegistration>();
    } catch (const nlohmann::json::exception& error) {
      throw ServiceError(400, "invalid_request", std::string("a worker registration: ") + error.what());
    }
    if (protocol != worker_protocol_version)
      throw ServiceError(400, "unsupported_protocol",
                         "this coordinator speaks worker protocol " + std::to_string(worker_protocol_version) +
                             " (a worker says its environment when it registers), the worker " +
                             std::to_string(protocol) + ": run the coordinator's version of cuda-agent worker");
    if (registration.capacity == 0 || registration.capacity > 4096)
      throw ServiceError(400, "invalid_request", "capacity: expects 1 to 4096 requests");
    return pool_->register_worker(registration);
  }

  /// `{"cancelled": [lease, ...]}`: the worker's leases cancelled since its last heartbeat.
  nlohmann::json worker_heartbeat(const std::string& worker) {
    return {{"cancelled", known_worker([&] { return pool_->heartbeat(worker); })}};
  }

  /// `{"max": N}` in; `{"leases": [...]}` out, after up to `wait` while there is none.
  nlohmann::json lease(const std::string& worker, const nlohmann::json& body, std::chrono::milliseconds wait) {
    const nlohmann::json most = body.is_object() ? body.value("max", nlohmann::json(1)) : nlohmann::json();
    if (!most.is_number_unsigned() || most.get<std::size_t>() == 0 || most.get<std::size_t>() > 4096)
      throw ServiceError(400, "invalid_request", "max: expects 1 to 4096 requests");
    const std::vector<WorkerLease> leases =
        known_worker([&] { return pool_->lease(worker, most.get<std::size_t>(), wait); });
    return {{"leases", leases}};
  }

  /// `{"lease", "result"}` in; `{"counted": bool}` out (false: the lease was no longer the
  /// worker's, and the result was dropped).
  nlohmann::json complete(const std::string& worker, const nlohmann::json& body) {
    needs_remote_workers();
    PoolResult result;
    std::string lease;
    try {
      lease = body.at("lease").get<std::string>();
      result = body.at("result").get<PoolResult>();
    } catch (const std::exception& error) {
      throw ServiceError(400, "invalid_request", std::string("a worker's result: ") + error.what());
    }
    return {{"counted", pool_->complete(worker, lease, std::move(result))}};
  }

  /// The worker leaves; what it held goes to others. 404 for an unknown one.
  nlohmann::json deregister_worker(const std::string& worker) {
    needs_remote_workers();
    if (!pool_->deregister_worker(worker))
      throw ServiceError(404, "unknown_worker", "no remote worker '" + worker + "' is registered");
    return {{"worker", worker}, {"deregistered", true}};
  }

  /// The remote workers registered now, how many requests each holds, and why it is
  /// quarantined (null: it takes requests).
  [[nodiscard]] nlohmann::json workers() const {
    needs_remote_workers();
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [id, worker] : pool_->remote_workers())
      list.push_back(
          {{"worker", id},
           {"registration", worker.registration},
           {"holds", worker.holds},
           {"quarantined", worker.quarantined.empty() ? nlohmann::json(nullptr) : nlohmann::json(worker.quarantined)}});
    return {{"workers", list}};
  }

 private:
  void needs_remote_workers() const {
    if (!options_.pool.remote_workers)
      throw ServiceError(404, "no_remote_workers",
                         "this service takes no remote workers (cuda-agent serve --accept-workers)");
  }

  /// The service's library policy `own` with a request's choices `asked` (at `field`), which
  /// may forbid what the service allows, never allow what it forbids.
  static nlohmann::json narrowed_libraries(const nlohmann::json& own, const nlohmann::json& asked,
                                           const std::string& field) {
    nlohmann::json libraries = own;
    for (const auto& [name, value] : asked.items()) {
      // Deriving from the reference allows less: each library only for the tasks that need it.
      const bool inverted = name == "derive_from_reference";
      const auto allows = [inverted](const nlohmann::json& choice) { return choice.get<bool>() != inverted; };
      if (allows(value) && !allows(own.at(name)))
        throw ServiceError(400, "unsupported_policy",
                           field + "." + name + ": this server's library policy has " + name + " " +
                               own.at(name).dump() + "; a request may forbid more than the server, not allow more");
      libraries[name] = value;
    }
    return libraries;
  }

  /// What `call` returns, an unknown worker as a 404 "unknown_worker".
  template <class Call>
  auto known_worker(Call call) -> decltype(call()) {
    needs_remote_workers();
    try {
      return call();
    } catch (const UnknownWorker& error) {
      throw ServiceError(404, "unknown_worker", error.what());
    }
  }

  /// A request checked and made self-contained (files inline), ready to journal and run.
  struct Prepared {
    std::string id;
    std::string client;
    nlohmann::json normalized;
    /// The service's policy with the request's own choices.
    nlohmann::json policy;
    Task task;
    std::map<std::string, std::string> files;
    int priority = 0;
    std::optional<std::chrono::system_clock::time_point> deadline;
    std::string write_error;           // why its files could not be written, if they could not
    std::optional<PoolResult> cached;  // the pool's result for it, known before it starts
  };

  struct Record {
    nlohmann::json status;
    /// The reward the request chose ("milestone", "speedup").
    std::string reward;
    std::vector<nlohmann::json> events;
    bool finished = false;
    std::string client;
    std::chrono::steady_clock::time_point finished_at;
  };

  struct ClientUsage {
    std::size_t in_flight = 0;
    std::size_t submitted = 0;
  };

  [[nodiscard]] ServiceClient client_named(const std::string& name) const {
    if (const auto known = options_.clients.find(name); known != options_.clients.end()) return known->second;
    ServiceClient client = options_.default_client;
    client.name = name;
    return client;
  }

  static double unix_seconds(std::chrono::system_clock::time_point when) {
    return std::chrono::duration<double>(when.time_since_epoch()).count();
  }

  /// Checks `request` (at `where` in the body) and reads what it names.
  Prepared prepare(const nlohmann::json& request, const std::string& where) const {
    const std::string prefix = where.empty() ? "" : where + ".";
    detail::require_schema(request_schema_, request, where);
    Prepared prepared;
    prepared.task = detail::task_of_request(request["task"], options_.allow_host_paths, prefix);
    const nlohmann::json& candidate = request["candidate"];
    if (candidate.contains("directory") == candidate.contains("files"))
      throw ServiceError(400, "invalid_request", prefix + "candidate: give either files or a directory");
    if (candidate.contains("directory")) {
      if (!options_.allow_host_paths)
        throw ServiceError(400, "host_paths_refused",
                           prefix +
                               "candidate.directory: this server does not read files of its host; send the "
                               "candidate's files");
      try {
        prepared.files = read_candidate_sources(candidate["directory"].get<std::string>()).files;
      } catch (const std::exception& error) {
        throw ServiceError(400, "candidate_unreadable", prefix + "candidate.directory: " + error.what());
      }
    } else {
      for (const auto& [path, content] : candidate["files"].items()) {
        if (!is_candidate_source_path(path))
          throw ServiceError(400, "invalid_candidate",
                             prefix + "candidate.files: '" + path +
                                 "' is no candidate file (model_new.py, or a source or header under kernels/)");
        prepared.files.emplace(path, content.get<std::string>());
      }
    }
    std::size_t bytes = 0;
    for (const auto& [path, content] : prepared.files) bytes += path.size() + content.size();
    if (bytes > options_.max_candidate_bytes)
      throw ServiceError(413, "candidate_too_large",
                         prefix + "candidate: its files hold " + std::to_string(bytes) + " bytes, more than the " +
                             std::to_string(options_.max_candidate_bytes) + " this server takes");
    prepared.policy = effective_policy(request.value("policy", nlohmann::json::object()), prefix + "policy");
    prepared.priority = request.value("priority", 0);
    if (request.contains("deadline_s"))
      prepared.deadline =
          std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                 std::chrono::duration<double>(request["deadline_s"].get<double>()));
    prepared.normalized = {{"task", {{"name", prepared.task.name}, {"source", prepared.task.reference_source}}},
                           {"candidate", {{"files", prepared.files}}},
                           {"policy", prepared.policy},
                           {"priority", prepared.priority},
                           {"metadata", request.value("metadata", nlohmann::json::object())}};
    if (prepared.deadline) prepared.normalized["deadline_at"] = unix_seconds(*prepared.deadline);
    return prepared;
  }

  /// Under the lock: the admission checks, then each request journaled (not yet synced:
  /// `journaled` is the last line's sequence) and started.
  void admit_and_start(std::unique_lock<std::mutex>& lock, const ServiceClient& client, std::vector<Prepared>& prepared,
                       nlohmann::json& statuses, std::uint64_t& journaled) {
    if (draining_ || stopping_)
      throw ServiceError(503, "draining", "the service is shutting down and takes no new requests");
    ClientUsage& usage = usage_[client.name];
    if (usage.in_flight + prepared.size() > client.max_in_flight)
      throw ServiceError(429, "too_many_in_flight",
                         "client '" + client.name + "' has " + std::to_string(usage.in_flight) +
                             " evaluations unfinished, and may have " + std::to_string(client.max_in_flight) +
                             ": submit again when some finish");
    if (client.quota != 0 && usage.submitted + prepared.size() > client.quota)
      throw ServiceError(429, "quota_exceeded",
                         "client '" + client.name + "' has used " + std::to_string(usage.submitted) + " of its " +
                             std::to_string(client.quota) + " evaluations");
    const std::size_t unfinished = pool_->counters().unfinished();
    if (unfinished + prepared.size() > options_.pool.max_pending)
      throw ServiceError(429, "queue_full",
                         "the service holds " + std::to_string(unfinished) + " unfinished evaluations, its limit is " +
                             std::to_string(options_.pool.max_pending) + ": submit again when some finish");
    for (Prepared& each : prepared) {
      each.client = client.name;
      const std::uint64_t line = journal_->write({{"type", "accepted"},
                                                  {"id", each.id},
                                                  {"client", each.client},
                                                  {"request", each.normalized},
                                                  {"accepted_at", unix_seconds(std::chrono::system_clock::now())}});
      ++usage.in_flight;
      ++usage.submitted;
      ++accepted_total_;
      if (each.cached) {
        // Complete in the answer itself: a crash that loses these lines loses nothing a
        // client cannot have again from the cache, so they wait for no sync.
        create_record(each);
        statuses.push_back(record_result(each.id, *each.cached));
        continue;
      }
      journaled = line;
      statuses.push_back(start(lock, each));
    }
  }

  [[nodiscard]] std::filesystem::path candidate_directory(const std::string& id) const {
    return options_.state_directory / "candidates" / id;
  }

  /// Writes the candidate's files where its evaluation reads them; a failure is kept in
  /// `write_error` and ends the evaluation as an infrastructure error when it starts.
  void write_files(Prepared& prepared) const {
    try {
      const std::filesystem::path directory = candidate_directory(prepared.id);
      detail::make_open_directory(directory);
      write_candidate_sources(prepared.files, directory);
    } catch (const std::exception& error) {
      prepared.write_error = error.what();
    }
  }

  /// What the pool is asked for `prepared` (its files in its candidate directory).
  [[nodiscard]] EvaluationRequest pool_request(const Prepared& prepared) const {
    EvaluationRequest request;
    request.id = prepared.id;
    request.task = prepared.task;
    request.candidate_directory = candidate_directory(prepared.id);
    request.policy = prepared.policy;
    request.timing = prepared.policy.value("timing", true);
    request.priority = prepared.priority;
    if (prepared.deadline)
      request.deadline =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                 *prepared.deadline - std::chrono::system_clock::now());
    return request;
  }

  /// Under the lock: the record of a request just accepted, queued.
  Record& create_record(const Prepared& prepared) {
    Record& record = records_[prepared.id];
    record.client = prepared.client;
    record.reward = prepared.policy.value("reward", std::string());
    record.status = {{"id", prepared.id},
                     {"stage", "queued"},
                     {"outcome", nullptr},
                     {"reward", nullptr},
                     {"rejection", nullptr},
                     {"evaluation", nullptr},
                     {"task", prepared.task.name},
                     {"client", prepared.client},
                     {"metadata", prepared.normalized.value("metadata", nlohmann::json::object())}};
    record.status["policy"] = prepared.policy;
    return record;
  }

  /// Under the lock: hands the request, its files written, to the pool.
  nlohmann::json start(std::unique_lock<std::mutex>& lock, const Prepared& prepared) {
    nlohmann::json status = create_record(prepared).status;
    EvaluationRequest request = pool_request(prepared);
    try {
      if (!prepared.write_error.empty()) throw std::runtime_error(prepared.write_error);
      // The pool's events come back into on_pool_event, which takes this lock.
      lock.unlock();
      (void)pool_->submit(std::move(request));
      lock.lock();
    } catch (const std::exception& error) {
      if (!lock.owns_lock()) lock.lock();
      finish_record(prepared.id, "infrastructure_error",
                    std::string("the service could not start the evaluation: ") + error.what(), nullptr);
    }
    return status;
  }

  /// Under the lock.
  [[nodiscard]] const Record& find(const std::string& id) const {
    const auto found = records_.find(id);
    if (found == records_.end()) throw ServiceError(404, "not_found", "no evaluation has the id '" + id + "'");
    return found->second;
  }

  void on_pool_event(const PoolEvent& event) {
    const std::lock_guard lock(mutex_);
    const auto found = records_.find(event.id);
    if (found == records_.end()) return;
    Record& record = found->second;
    nlohmann::json progress = {{"stage", to_string(event.stage)},
                               {"at", unix_seconds(std::chrono::system_clock::now())}};
    if (!event.device.empty()) progress["device"] = event.device;
    if (event.stage != PoolStage::finished) {
      record.status["stage"] = to_string(event.stage);
      if (!event.device.empty()) record.status["device"] = event.device;
      record.events.push_back(std::move(progress));
      changed_.notify_all();
      return;
    }
    if (stopping_ && event.result && event.result->outcome == PoolOutcome::cancelled) {
      // The service stops: left unfinished in the journal, for the next start to run.
      return;
    }
    record_result(event.id, *event.result);
  }

  /// Under the lock: `result` as the final status of evaluation `id`, which it returns.
  nlohmann::json record_result(const std::string& id, const PoolResult& result) {
    Record& record = records_.at(id);
    nlohmann::json reward = nullptr;
    nlohmann::json evaluation = nullptr;
    nlohmann::json rejection = nullptr;
    if (result.evaluation) {
      evaluation = *result.evaluation;
      if (const auto rejected = result.evaluation->rejection()) rejection = *rejected;
      if (result.outcome == PoolOutcome::evaluated) reward = reward_of(record.reward, *result.evaluation);
    }
    record.status["cached"] = result.cached;
    record.status["device"] = result.device;
    record.status["times_ms"] = {{"queued", result.queued_for.count()},
                                 {"building", result.building_for.count()},
                                 {"on_device", result.on_device_for.count()}};
    record.status["evaluation"] = evaluation;
    record.status["rejection"] = rejection;
    return finish_record(id, to_string(result.outcome), result.message, reward);
  }

  /// The reward `kind` gives `evaluation`: the service's own function for its own kind.
  [[nodiscard]] Reward reward_of(const std::string& kind, const Evaluation& evaluation) const {
    if (kind.empty() || kind == options_.policy.value("reward", std::string())) return options_.reward(evaluation);
    if (kind == "speedup") return SpeedupReward{}.reward(evaluation);
    return MilestoneReward{}.reward(evaluation);
  }

  /// Under the lock: the record's final status, journaled and returned; its files removed.
  nlohmann::json finish_record(const std::string& id, const std::string& outcome, const std::string& message,
                               const nlohmann::json& reward) {
    Record& record = records_.at(id);
    if (record.finished) return record.status;
    record.status["stage"] = "finished";
    record.status["outcome"] = outcome;
    record.status["reward"] = reward;
    record.status["message"] = message;
    record.finished = true;
    record.finished_at = std::chrono::steady_clock::now();
    record.events.push_back(
        {{"stage", "finished"},
         {"outcome", outcome},
         {"reward", reward.is_object() ? reward.value("value", nlohmann::json()) : nlohmann::json()},
         {"at", unix_seconds(std::chrono::system_clock::now())}});
    try {
      // Not synced: lost in a crash, the evaluation runs again after the restart, which
      // costs time only (the next synced record carries this one to disk anyway).
      journal_->append({{"type", "finished"}, {"id", id}, {"status", record.status}}, /*sync=*/false);
    } catch (const std::exception&) {
      // The result stands; a restart would run the evaluation again, which costs time only.
    }
    nlohmann::json status = record.status;
    auto& usage = usage_[record.client];
    if (usage.in_flight > 0) --usage.in_flight;
    finished_order_.push_back(id);
    while (finished_order_.size() > options_.max_results_kept) {
      records_.erase(finished_order_.front());
      finished_order_.pop_front();
    }
    std::error_code ignored;
    std::filesystem::remove_all(candidate_directory(id), ignored);
    changed_.notify_all();
    return status;
  }

  /// Rebuilds the records from the journal, compacts it, and resubmits what had not finished.
  void recover(const std::vector<nlohmann::json>& history) {
    std::map<std::string, nlohmann::json> accepted;
    std::vector<std::string> order;
    std::map<std::string, nlohmann::json> finished;
    for (const nlohmann::json& record : history) {
      const std::string type = record.value("type", "");
      const std::string id = record.value("id", "");
      if (id.empty()) continue;
      if (type == "accepted") {
        if (!accepted.contains(id)) order.push_back(id);
        accepted[id] = record;
      } else if (type == "finished") {
        finished[id] = record;
      }
    }
    std::vector<nlohmann::json> compacted;
    std::vector<nlohmann::json> unfinished;
    std::unique_lock lock(mutex_);
    // Only the newest `max_results_kept` results are answered for, and kept in the journal.
    auto finished_left = static_cast<std::size_t>(
        std::count_if(order.begin(), order.end(), [&](const std::string& id) { return finished.contains(id); }));
    for (const std::string& id : order) {
      const nlohmann::json& entry = accepted[id];
      if (const auto done = finished.find(id); done != finished.end()) {
        if (finished_left-- > options_.max_results_kept) continue;
        Record& record = records_[id];
        record.status = done->second.value("status", nlohmann::json::object());
        record.client = entry.value("client", "local");
        record.finished = true;
        record.events.push_back({{"stage", "finished"}, {"outcome", record.status.value("outcome", "")}});
        finished_order_.push_back(id);
        compacted.push_back(entry);
        compacted.push_back(done->second);
      } else {
        unfinished.push_back(entry);
        compacted.push_back(entry);
      }
    }
    journal_->rewrite(compacted);
    for (const nlohmann::json& entry : unfinished) {
      Prepared prepared;
      prepared.id = entry["id"];
      prepared.client = entry.value("client", "local");
      prepared.normalized = entry["request"];
      prepared.task.name = prepared.normalized["task"].value("name", "task");
      prepared.task.reference_source = prepared.normalized["task"].value("source", "");
      prepared.files = prepared.normalized["candidate"].value("files", std::map<std::string, std::string>{});
      prepared.policy = prepared.normalized.value("policy", options_.policy);
      prepared.priority = prepared.normalized.value("priority", 0);
      if (prepared.normalized.contains("deadline_at"))
        prepared.deadline =
            std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::duration<double>(prepared.normalized["deadline_at"].get<double>())));
      ++usage_[prepared.client].in_flight;
      ++recovered_;
      write_files(prepared);
      start(lock, prepared);
    }
  }

  EvaluationServiceOptions options_;
  nlohmann::json request_schema_;
  std::unique_ptr<detail::Journal> journal_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::map<std::string, Record> records_;
  std::deque<std::string> finished_order_;
  std::map<std::string, ClientUsage> usage_;
  std::uint64_t accepted_total_ = 0;
  std::size_t recovered_ = 0;
  bool draining_ = false;
  bool stopping_ = false;

  // Last: it stops first, while the records its events update still exist.
  std::unique_ptr<EvaluationPool> pool_;
};

}  // namespace cuda_agent
