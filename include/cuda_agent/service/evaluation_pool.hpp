// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `EvaluationPool`: many trusted evaluations at once, streamed through the stages of a
/// `StagedEvaluator`. Builds run on build workers (CPU only, sharing one evaluator's
/// compile driver and caches), so a build never holds a device; each slot (a GPU, or a CPU
/// for hosts and tests without one) verifies and times one candidate at a time with an
/// evaluator of its own. Slots of one device may verify side by side, and timing has the
/// device to itself: it waits for the verifications running there, and new ones wait for
/// it. A verification that runs out of device memory beside other work goes again with
/// the device to itself, and only a second failure there is the candidate's. Requests go by priority, then deadline,
/// then arrival, never in waves; a request past its deadline or cancelled stops at the next stage; the number of
/// requests not finished is bounded and a full pool says so (`PoolFull`). A repeated request (the same task, files
/// and policy) is answered from the cache without any work, by a result of an environment that evaluates here now
/// (see below). Failures of the evaluation itself (a worker lost, a harness error) come back as infrastructure
/// errors, never as the candidate's verdict, so that a trainer retries or skips the sample instead of scoring it;
/// the slot's evaluator is replaced after one.
///
/// Admission by device memory (`device_memory_bytes`): the first verification of a task has
/// its device to itself, and its evaluation reports what the reference used there (the
/// harness's "footprint"); later verifications of that task are admitted beside others while
/// the estimates of all fit, twice what the reference used (the candidate's process holds as
/// much again).
///
/// Remote workers (`EvaluationPoolOptions::remote_workers`): a worker process with a pool of
/// its own registers (`register_worker`), takes whole requests (`lease`: the task, the
/// candidate's files and the policy) up to its free capacity, and sends back each result
/// (`complete`). Placement is by pull: a worker asks for as many as it has room for, and
/// gets the requests that would go first here. A worker not heard from (`heartbeat`, or any
/// call) within `worker_timeout` is lost: its requests go back to the queue, and what it
/// sends later for them is dropped, so that every request has exactly one result.
///
/// The result cache keeps each result under the environment that evaluated it: this pool's
/// own (`EvaluationPoolOptions::environment`) or its worker's (`WorkerRegistration::
/// environment`: GPU, driver, torch, harness). A request is answered from the cache only by
/// a result of an environment that could evaluate it now: this pool's where it has slots, or
/// that of a registered worker not quarantined. Workers of one environment share their
/// results; a worker of another GPU or torch evaluates for itself. A worker that does not
/// say its environment has its results passed on, never cached.
///
/// A worker whose GPU is broken turns every request into an infrastructure error. One whose
/// last `quarantine_after` results were all infrastructure errors is quarantined: it stays
/// registered (it still heartbeats, and says so in `remote_workers()`), gets no more
/// requests, is told to stop what it holds, which goes back to the queue, and the host
/// hears of it (`on_quarantine`, say to replace the worker). A request that a worker fails
/// with an infrastructure error goes back to the queue for a worker that has not failed it,
/// at most `worker_attempts` workers in all; the last error is its result, as it is at once
/// where no other worker could take it.

#include <algorithm>           // min_element, find, count_if, transform, max
#include <cctype>              // tolower
#include <chrono>              // steady_clock, milliseconds, duration_cast
#include <condition_variable>  // condition_variable, condition_variable_any
#include <cstddef>             // size_t
#include <cstdint>             // uint64_t
#include <exception>           // exception
#include <filesystem>          // path, remove_all
#include <functional>          // function
#include <future>              // promise, shared_future
#include <map>                 // map
#include <memory>              // shared_ptr, make_shared, unique_ptr
#include <mutex>               // mutex, unique_lock, lock_guard
#include <optional>            // optional
#include <set>                 // set
#include <stdexcept>           // runtime_error, invalid_argument
#include <stop_token>          // stop_token
#include <string>              // string, to_string
#include <system_error>        // error_code
#include <thread>              // jthread
#include <utility>             // move, exchange
#include <vector>              // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/harness_session.hpp"
#include "cuda_agent/detail/sha256.hpp"
#include "cuda_agent/evaluate/staged_evaluator.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/verify/harness_worker.hpp"

namespace cuda_agent {

/// Where a pool runs candidates: one device (`device` "cuda" with its `index`, or "cpu").
/// Several slots may name the same device.
struct PoolSlot {
  std::string device = "cpu";
  int index = 0;

  /// "cuda:0", "cpu:1": what results and counters call the slot's device.
  [[nodiscard]] std::string device_name() const { return device + ":" + std::to_string(index); }
};

/// One evaluation to run.
struct EvaluationRequest {
  /// The request's id, of the host's choosing (a service that journals its requests keeps
  /// them across restarts); empty: the pool makes one. Unique among unfinished requests.
  std::string id;
  Task task;
  /// The candidate's directory (model_new.py and kernels/); its source files are copied
  /// when the request is accepted, so later changes to it do not reach the evaluation.
  std::filesystem::path candidate_directory;
  /// The settings that change a verdict (tolerance profile, library policy, timing budget),
  /// as the host describes them: part of the cache key, and handed to the evaluators with
  /// the candidate as an `EvaluationPolicy` (its form; keys it does not name are the host's
  /// alone). A host that wants equal requests to share cached results fills in its defaults.
  nlohmann::json policy = nlohmann::json::object();
  /// Time a correct candidate after verifying it (where the slot's evaluator times at all);
  /// false: verify only. Part of the cache key through `policy`, which should say so.
  bool timing = true;
  /// Higher first.
  int priority = 0;
  /// Not started on a further stage after this time (finished as `PoolOutcome::expired`).
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

enum class PoolStage { queued, building, waiting_for_slot, verifying, timing, on_worker, finished };
enum class PoolOutcome {
  evaluated,             ///< `PoolResult::evaluation` is the verdict on the candidate
  infrastructure_error,  ///< the evaluation failed for reasons not the candidate's; retry or skip it
  cancelled,
  expired,  ///< its deadline passed before it finished
};

[[nodiscard]] inline const char* to_string(PoolStage stage) noexcept {
  switch (stage) {
    case PoolStage::queued:
      return "queued";
    case PoolStage::building:
      return "building";
    case PoolStage::waiting_for_slot:
      return "waiting_for_slot";
    case PoolStage::verifying:
      return "verifying";
    case PoolStage::timing:
      return "timing";
    case PoolStage::on_worker:
      return "on_worker";
    case PoolStage::finished:
      return "finished";
  }
  return "unknown";
}

[[nodiscard]] inline const char* to_string(PoolOutcome outcome) noexcept {
  switch (outcome) {
    case PoolOutcome::evaluated:
      return "evaluated";
    case PoolOutcome::infrastructure_error:
      return "infrastructure_error";
    case PoolOutcome::cancelled:
      return "cancelled";
    case PoolOutcome::expired:
      return "expired";
  }
  return "unknown";
}

struct PoolResult {
  std::string id;
  PoolOutcome outcome = PoolOutcome::evaluated;
  /// The evaluation (for an infrastructure error, as far as it went).
  std::optional<Evaluation> evaluation;
  /// Why it was not evaluated (infrastructure errors, cancellations, expiries).
  std::string message;
  /// Answered from the cache: no work was done for this request.
  bool cached = false;
  /// The device that verified it ("cuda:0"), empty when it never reached one.
  std::string device;
  std::chrono::milliseconds queued_for{0};
  std::chrono::milliseconds building_for{0};
  std::chrono::milliseconds on_device_for{0};
};

/// A request moved to another stage; `outcome` is set on `PoolStage::finished`. Events are
/// numbered in the order they happened and delivered in that order, one at a time: a
/// request's events always run from `queued` to `finished`.
struct PoolEvent {
  std::string id;
  PoolStage stage = PoolStage::queued;
  std::optional<PoolOutcome> outcome;
  std::string device;
  std::uint64_t sequence = 0;
  /// On `PoolStage::finished`: the result, as the request's future gives it.
  std::shared_ptr<const PoolResult> result;
};

struct PoolCounters {
  /// Requests in each stage now.
  std::size_t queued = 0, building = 0, waiting_for_slot = 0, verifying = 0, timing = 0;
  /// Requests a remote worker holds now.
  std::size_t on_worker = 0;
  /// Requests finished, by outcome, and those answered from the cache among them.
  std::size_t evaluated = 0, infrastructure_errors = 0, cancelled = 0, expired = 0, cache_hits = 0;
  /// Verifications that ran out of device memory beside other work and went again alone.
  std::size_t retried_alone = 0;
  /// Verifications that had their device to themselves because their task's memory was not
  /// known yet, or did not fit beside anything (with `device_memory_bytes` set).
  std::size_t admitted_alone = 0;
  /// Remote workers registered now; requests given back to the queue because their worker
  /// was lost, left, gave them back, was quarantined or failed them.
  std::size_t workers = 0, requeued = 0;
  /// Remote workers quarantined now (registered, given no requests), and since the start.
  std::size_t quarantined = 0, quarantines = 0;
  /// Time each device spent verifying or timing (overlapping verifications count once each).
  std::map<std::string, std::chrono::milliseconds> busy;

  /// Requests accepted and not finished, in whatever stage.
  [[nodiscard]] std::size_t unfinished() const noexcept {
    return queued + building + waiting_for_slot + verifying + timing + on_worker;
  }
};

/// What a remote worker says of itself when it registers.
struct WorkerRegistration {
  /// For people: the host and its devices, say "node7/cuda:0,1".
  std::string name;
  /// Requests it holds at once, at most (its free capacity is this less what it holds).
  std::size_t capacity = 1;
  /// Anything else worth showing (devices, versions); kept as given.
  nlohmann::json description = nlohmann::json::object();
  /// What its verdicts depend on besides the request: its own pool's
  /// `EvaluationPoolOptions::environment`. Its results are cached under it. Empty: unknown,
  /// and what it sends is never cached.
  std::string environment;
};

/// A remote worker as the pool sees it (`EvaluationPool::remote_workers()`).
struct RemoteWorkerState {
  WorkerRegistration registration;
  /// Requests it holds now.
  std::size_t holds = 0;
  /// Why it was quarantined; empty while it takes requests.
  std::string quarantined;
};

/// A registration accepted: the worker's id for its later calls, and how often it must be
/// heard from.
struct WorkerGrant {
  std::string worker;
  std::chrono::milliseconds heartbeat_interval{10'000};
  std::chrono::milliseconds timeout{30'000};
};

/// A request given to a remote worker: all it needs to evaluate it on its own.
struct WorkerLease {
  /// Names this lease in `complete`; a lease is never given twice.
  std::string lease;
  /// The request's id at the coordinator (for people; the worker needs only the lease).
  std::string id;
  Task task;
  /// The candidate's source files by relative path (model_new.py, kernels/...).
  std::map<std::string, std::string> files;
  nlohmann::json policy = nlohmann::json::object();
  bool timing = true;
  int priority = 0;
  /// Time left before the request's deadline, when it has one.
  std::optional<std::chrono::milliseconds> time_left;
};

/// A remote worker the pool does not know (never registered, lost or gone): it must
/// register again.
class UnknownWorker : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A request the pool cannot take: it holds as many unfinished requests as it may, or it
/// is closing. Nothing was queued; the message says which.
class PoolFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EvaluationPoolOptions {
  std::vector<PoolSlot> slots{PoolSlot{}};
  std::size_t build_workers = 1;
  /// Requests accepted and not finished, at most.
  std::size_t max_pending = 256;
  /// Where the copies of candidates' files go until their evaluation ends. Empty: a
  /// directory under the system's temporary directory.
  std::filesystem::path work_directory;
  /// What else a verdict depends on (GPU, driver, torch, harness and library versions):
  /// part of the cache key, so that a fix to the evaluator invalidates what it decided.
  std::string environment;
  bool cache_results = true;
  /// Device memory the verifications of one device may hold together, in bytes; 0: no
  /// admission by memory (an out-of-memory failure beside other work still goes again alone).
  std::uint64_t device_memory_bytes = 0;
  /// Whether remote workers may take requests (see the file's comment). A pool with no
  /// slots of its own then builds nothing either: every request goes to a worker.
  bool remote_workers = false;
  /// A remote worker not heard from for this long is lost.
  std::chrono::milliseconds worker_timeout{30'000};
  /// A remote worker whose last this many results were all infrastructure errors is
  /// quarantined (an evaluated result starts the count again); 0: never.
  std::size_t quarantine_after = 3;
  /// Remote workers a request is tried on, at most, while each fails it with an
  /// infrastructure error; then that error is its result.
  std::size_t worker_attempts = 3;
  /// Called when a remote worker is quarantined, with its id, its registration and why;
  /// from the thread that sent its last result, with no lock of the pool held.
  std::function<void(const std::string& worker, const WorkerRegistration&, const std::string& why)> on_quarantine;
  /// Called on every change of stage, from the pool's threads (or the one that submits or
  /// cancels), with no lock of the pool held: one call at a time, in the order of the events.
  std::function<void(const PoolEvent&)> on_event;
};

class EvaluationPool {
 public:
  /// Makes the evaluator of a slot (again, after an infrastructure error).
  using SlotEvaluatorFactory = std::function<AnyStagedEvaluator(const PoolSlot&)>;

  struct Ticket {
    std::string id;
    std::shared_future<PoolResult> result;
  };

  /// `builder` prepares every candidate (from all build workers at once); each slot gets an
  /// evaluator of its own from `slot_evaluator`.
  EvaluationPool(EvaluationPoolOptions options, AnyStagedEvaluator builder, SlotEvaluatorFactory slot_evaluator)
      : options_(std::move(options)), builder_(std::move(builder)), make_evaluator_(std::move(slot_evaluator)) {
    if (options_.slots.empty() && !options_.remote_workers)
      throw std::invalid_argument("EvaluationPool needs at least one slot, or remote workers");
    if (options_.build_workers == 0 && !options_.slots.empty())
      throw std::invalid_argument("EvaluationPool needs at least one build worker");
    if (options_.remote_workers && options_.worker_timeout <= std::chrono::milliseconds{0})
      throw std::invalid_argument("EvaluationPool: worker_timeout must be positive");
    if (options_.remote_workers && options_.worker_attempts == 0)
      throw std::invalid_argument("EvaluationPool: worker_attempts must be positive");
    if (options_.max_pending == 0) throw std::invalid_argument("EvaluationPool: max_pending must be positive");
    if (!make_evaluator_) throw std::invalid_argument("EvaluationPool needs a factory of slot evaluators");
    if (options_.work_directory.empty())
      options_.work_directory = std::filesystem::temp_directory_path() / ("cuda-agent-pool-" + detail::random_hex(6));
    detail::make_open_directory(options_.work_directory);
    for (const PoolSlot& slot : options_.slots) {
      gates_.try_emplace(slot.device_name(), std::make_unique<DeviceGate>());
      counters_.busy.try_emplace(slot.device_name(), std::chrono::milliseconds{0});
      slot_evaluators_.push_back(make_evaluator_(slot));
    }
    // Without slots, a local build would wait for a slot forever: the remote workers build.
    for (std::size_t i = 0; !options_.slots.empty() && i < options_.build_workers; ++i)
      workers_.emplace_back([this](const std::stop_token& stop) { build_loop(stop); });
    if (options_.remote_workers) workers_.emplace_back([this](const std::stop_token& stop) { watch_workers(stop); });
    for (std::size_t i = 0; i < options_.slots.size(); ++i)
      workers_.emplace_back([this, i](const std::stop_token& stop) { slot_loop(stop, i); });
  }

  EvaluationPool(const EvaluationPool&) = delete;
  EvaluationPool& operator=(const EvaluationPool&) = delete;

  /// Cancels what waits, lets what runs finish its stage, and stops.
  ~EvaluationPool() {
    {
      std::unique_lock lock(mutex_);
      closing_ = true;
      for (auto& [id, job] : jobs_) job->cancel_requested = true;
    }
    cancel_waiting();
    {
      std::unique_lock lock(mutex_);
      idle_.wait(lock, [&] { return jobs_.empty(); });
    }
    for (auto& worker : workers_) worker.request_stop();
    work_.notify_all();
    workers_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(options_.work_directory, ignored);
  }

  /// Accepts `request` (throws PoolFull when the pool holds `max_pending` unfinished
  /// requests, or is closing, and std::invalid_argument for a policy no evaluator could
  /// apply). The result comes through the ticket's future.
  [[nodiscard]] Ticket submit(EvaluationRequest request) {
    auto job = std::make_shared<Job>();
    try {
      job->policy = request.policy.get<EvaluationPolicy>();
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(std::string("EvaluationPool: the request's ") + error.what());
    }
    job->request = std::move(request);
    job->accepted = std::chrono::steady_clock::now();
    job->environment = options_.environment;
    const std::filesystem::path snapshot = options_.work_directory / ("request-" + detail::random_hex(8));
    try {
      const CandidateSources sources = read_candidate_sources(job->request.candidate_directory);
      write_candidate_sources(sources.files, snapshot);
      job->snapshot = std::make_shared<detail::DirectoryCleanup>(snapshot, false);
      job->directory = snapshot;
      if (options_.cache_results) job->cache_key = cache_key(job->request, sources.files);
    } catch (const std::exception&) {
      // Unreadable: the builder reads the directory itself and says why, as the verdict.
      job->directory = job->request.candidate_directory;
    }
    std::vector<PoolEvent> events;
    Ticket ticket;
    {
      std::unique_lock lock(mutex_);
      if (closing_) throw PoolFull("the pool is closing: it takes no new requests");
      ++submitted_;
      if (job->request.id.empty())
        job->id = "evaluation-" + std::to_string(submitted_) + "-" + detail::random_hex(4);
      else if (jobs_.contains(job->request.id))
        throw std::invalid_argument("EvaluationPool: the request id '" + job->request.id + "' is already in use");
      else
        job->id = job->request.id;
      ticket = Ticket{job->id, job->promise.get_future().share()};
      if (!job->cache_key.empty())
        if (std::optional<PoolResult> result = cache_hit(job->cache_key)) {
          result->id = job->id;
          events.push_back(PoolEvent{job->id,
                                     PoolStage::finished,
                                     PoolOutcome::evaluated,
                                     {},
                                     ++events_made_,
                                     std::make_shared<const PoolResult>(*result)});
          job->promise.set_value(std::move(*result));
          lock.unlock();
          emit(events);
          return ticket;
        }
      if (jobs_.size() >= options_.max_pending)
        throw PoolFull("the pool holds " + std::to_string(jobs_.size()) +
                       " unfinished requests, its limit (max_pending): submit again when one finishes");
      job->sequence = submitted_;
      jobs_.emplace(job->id, job);
      build_queue_.push_back(job);
      ++counters_.queued;
      events.push_back(PoolEvent{job->id, PoolStage::queued, std::nullopt, {}, ++events_made_, nullptr});
    }
    work_.notify_all();
    emit(events);
    return ticket;
  }

  /// The cached result of a request with these `files`, as `submit` would answer it from
  /// the cache (counted as a cache hit), or nothing: for a caller that holds the files
  /// already and would rather not write them when no work is needed. The result's id is
  /// left empty, and no event is emitted.
  [[nodiscard]] std::optional<PoolResult> cached_result(const EvaluationRequest& request,
                                                        const std::map<std::string, std::string>& files) {
    if (!options_.cache_results) return std::nullopt;
    const std::string key = cache_key(request, files);
    const std::lock_guard lock(mutex_);
    std::optional<PoolResult> result = cache_hit(key);
    if (result) result->id.clear();
    return result;
  }

  /// Cancels a request that has not finished: at once if it waits, after its current
  /// stage if it runs. False for an unknown or finished one.
  bool cancel(const std::string& id) {
    std::vector<PoolEvent> events;
    {
      std::unique_lock lock(mutex_);
      const auto found = jobs_.find(id);
      if (found == jobs_.end()) return false;
      const std::shared_ptr<Job> job = found->second;
      job->cancel_requested = true;
      if (take_from(build_queue_, job) || take_from(slot_queue_, job))
        finish(lock, job, PoolOutcome::cancelled, "cancelled before it ran", events);
      else if (!job->lease.empty())
        finish(lock, job, PoolOutcome::cancelled, "cancelled while a remote worker held it", events);
    }
    emit(events);
    return true;
  }

  /// The stage of an unfinished request (nothing for an unknown or finished one).
  [[nodiscard]] std::optional<PoolStage> stage(const std::string& id) const {
    const std::lock_guard lock(mutex_);
    const auto found = jobs_.find(id);
    if (found == jobs_.end()) return std::nullopt;
    return found->second->stage;
  }

  [[nodiscard]] PoolCounters counters() const {
    const std::lock_guard lock(mutex_);
    return counters_;
  }

  /// Takes no new requests, and returns once every accepted one has finished.
  void close() {
    std::unique_lock lock(mutex_);
    closing_ = true;
    idle_.wait(lock, [&] { return jobs_.empty(); });
  }

  /// Accepts a remote worker (throws std::logic_error where the pool takes none).
  [[nodiscard]] WorkerGrant register_worker(const WorkerRegistration& registration) {
    if (!options_.remote_workers)
      throw std::logic_error("this pool takes no remote workers (EvaluationPoolOptions::remote_workers)");
    if (registration.capacity == 0) throw std::invalid_argument("a remote worker's capacity must be positive");
    const std::lock_guard lock(mutex_);
    const std::string id = "worker-" + std::to_string(++workers_registered_) + "-" + detail::random_hex(6);
    RemoteWorker& worker = remote_workers_[id];
    worker.registration = registration;
    worker.last_heard = std::chrono::steady_clock::now();
    counters_.workers = remote_workers_.size();
    return WorkerGrant{id, heartbeat_interval(), options_.worker_timeout};
  }

  /// The worker is alive. Returns the leases it holds whose requests were cancelled since
  /// (to stop them); throws UnknownWorker for a worker the pool does not know.
  std::vector<std::string> heartbeat(const std::string& worker) {
    const std::lock_guard lock(mutex_);
    RemoteWorker& known = heard_from(worker);
    return std::exchange(known.cancelled, {});
  }

  /// Up to `most` requests for `worker`, the ones that would go first here among those it
  /// has not failed; waits up to `wait` (at most half the worker timeout) while there is
  /// none. A quarantined worker gets none. Throws UnknownWorker.
  [[nodiscard]] std::vector<WorkerLease> lease(const std::string& worker, std::size_t most,
                                               std::chrono::milliseconds wait) {
    std::vector<PoolEvent> events;
    std::vector<std::shared_ptr<Job>> taken;
    {
      std::unique_lock lock(mutex_);
      (void)heard_from(worker);
      const auto until = std::chrono::steady_clock::now() + std::min(wait, options_.worker_timeout / 2);
      const auto has_work = [&] {
        const auto found = remote_workers_.find(worker);
        return found == remote_workers_.end() || (found->second.quarantined.empty() &&
                                                  std::any_of(build_queue_.begin(), build_queue_.end(),
                                                              [&](const auto& job) { return may_take(*job, worker); }));
      };
      work_.wait_until(lock, until, [&] { return closing_ || has_work(); });
      RemoteWorker& holder = heard_from(worker);
      while (!closing_ && holder.quarantined.empty() && taken.size() < most) {
        const auto first = first_of(build_queue_, [&](const Job& job) { return may_take(job, worker); });
        if (first == build_queue_.end()) break;
        std::shared_ptr<Job> job = *first;
        build_queue_.erase(first);
        job->queued_for = since(job->accepted);
        if (stopped_here(lock, job, events)) continue;
        job->lease = "lease-" + detail::random_hex(12);
        job->worker = worker;
        job->device = holder.registration.name;
        job->environment.reset();
        if (!holder.registration.environment.empty()) job->environment = holder.registration.environment;
        holder.leases.insert(job->lease);
        leases_.emplace(job->lease, job);
        move_to(job, PoolStage::on_worker, events);
        taken.push_back(job);
      }
    }
    emit(events);
    std::vector<WorkerLease> leases;
    for (const auto& job : taken) {
      WorkerLease lease{
          job->lease,  job->id, job->request.task, {}, job->request.policy, job->request.timing, job->request.priority,
          std::nullopt};
      if (job->request.deadline)
        lease.time_left =
            std::max(std::chrono::milliseconds{0}, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                       *job->request.deadline - std::chrono::steady_clock::now()));
      try {
        lease.files = read_candidate_sources(job->directory).files;
      } catch (const std::exception&) {
        // Unreadable here: the worker reads an empty candidate and its builder says why.
      }
      leases.push_back(std::move(lease));
    }
    return leases;
  }

  /// The result of `lease` from `worker`: true when it counts. False when the lease is no
  /// longer the worker's (its request was cancelled, or went back to the queue when the
  /// worker was lost or quarantined): the result is dropped. A result the worker did not
  /// evaluate (cancelled there, say because it stopped) sends the request back to the
  /// queue; so does an infrastructure error, while another worker may try it (see the
  /// file's comment), and it counts towards the worker's quarantine.
  bool complete(const std::string& worker, const std::string& lease, PoolResult result) {
    std::vector<PoolEvent> events;
    std::optional<WorkerRegistration> quarantined;
    std::string why;
    {
      std::unique_lock lock(mutex_);
      const auto found = leases_.find(lease);
      if (found == leases_.end() || found->second->worker != worker) return false;
      const std::shared_ptr<Job> job = found->second;
      RemoteWorker& holder = heard_from(worker);
      holder.leases.erase(lease);
      leases_.erase(found);
      // The infrastructure error the worker reports, if that is what it reports.
      std::optional<std::string> failure;
      if (result.outcome == PoolOutcome::infrastructure_error)
        failure = result.message;
      else if (const auto harness = harness_failure(result.outcome, result.evaluation))
        failure = harness->message;
      const bool failed = failure.has_value();
      if (failed) {
        ++holder.failures_in_a_row;
        job->failed_on.insert(worker);
      } else if (result.outcome == PoolOutcome::evaluated) {
        holder.failures_in_a_row = 0;
      }
      if (result.outcome == PoolOutcome::cancelled && !job->cancel_requested) {
        requeue(job, events);
      } else if (failed && !job->cancel_requested && job->failed_on.size() < options_.worker_attempts &&
                 another_may_take(*job)) {
        requeue(job, events);
      } else {
        job->remote_evaluation = std::move(result.evaluation);
        job->building_for = result.building_for;
        job->on_device_for = result.on_device_for;
        if (!result.device.empty()) job->device = holder.registration.name + "/" + result.device;
        if (failed && job->failed_on.size() > 1)
          result.message = "infrastructure errors on " + std::to_string(job->failed_on.size()) +
                           " remote workers; the last: " + result.message;
        finish(lock, job, result.outcome, std::move(result.message), events);
      }
      if (failed && holder.quarantined.empty() && options_.quarantine_after > 0 &&
          holder.failures_in_a_row >= options_.quarantine_after) {
        why = std::to_string(holder.failures_in_a_row) + " infrastructure errors in a row, the last: " + *failure;
        quarantine(holder, why, events);
        quarantined = holder.registration;
      }
    }
    work_.notify_all();
    emit(events);
    if (quarantined && options_.on_quarantine) options_.on_quarantine(worker, *quarantined, why);
    return true;
  }

  /// The worker leaves: the requests it holds go back to the queue. False for an unknown one.
  bool deregister_worker(const std::string& worker) {
    std::vector<PoolEvent> events;
    {
      const std::lock_guard lock(mutex_);
      if (!remote_workers_.contains(worker)) return false;
      forget_worker(worker, events);
    }
    work_.notify_all();
    emit(events);
    return true;
  }

  /// The remote workers registered now, by id: what each said of itself, how many requests
  /// it holds, and whether it is quarantined.
  [[nodiscard]] std::map<std::string, RemoteWorkerState> remote_workers() const {
    const std::lock_guard lock(mutex_);
    std::map<std::string, RemoteWorkerState> workers;
    for (const auto& [id, worker] : remote_workers_)
      workers.emplace(id, RemoteWorkerState{worker.registration, worker.leases.size(), worker.quarantined});
    return workers;
  }

 private:
  struct Job {
    std::string id;
    EvaluationRequest request;
    std::filesystem::path directory;
    std::shared_ptr<detail::DirectoryCleanup> snapshot;
    std::string cache_key;
    /// `request.policy`, as the evaluators take it.
    EvaluationPolicy policy;
    std::promise<PoolResult> promise;
    PoolStage stage = PoolStage::queued;
    bool cancel_requested = false;
    /// Finished as an infrastructure error: the slot's evaluator (its workers) is replaced.
    bool infrastructure_failure = false;
    /// Verified with the device to itself: it ran out of device memory beside other work, or
    /// its task's memory is not known (or fits beside nothing).
    bool alone = false;
    /// Device memory its verification is admitted with (0: none counted).
    std::uint64_t memory_estimate = 0;
    std::uint64_t sequence = 0;
    std::optional<PreparedCandidate> prepared;
    /// On a remote worker: its lease and the worker's id; its verdict once it sent one.
    std::string lease, worker;
    std::optional<Evaluation> remote_evaluation;
    /// Where it is evaluated: this pool's environment, or its remote worker's (nothing: a
    /// worker that did not say; its result is not cached).
    std::optional<std::string> environment;
    /// The remote workers that failed it with an infrastructure error: none takes it again.
    std::set<std::string> failed_on;
    std::string device;
    std::chrono::steady_clock::time_point accepted, stage_started;
    std::chrono::milliseconds queued_for{0}, building_for{0}, on_device_for{0};
  };
  using JobQueue = std::vector<std::shared_ptr<Job>>;

  /// Verifications of one device share it, while their memory estimates fit `budget`
  /// (0: any number); timing has it alone. A waiting timer keeps new verifications out, and
  /// so does one waiting for memory, so that a busy queue starves neither.
  class DeviceGate {
   public:
    void lock_shared(std::uint64_t bytes = 0, std::uint64_t budget = 0) {
      std::unique_lock lock(mutex_);
      const auto fits = [&] { return budget == 0 || verifying_ == 0 || reserved_ + bytes <= budget; };
      changed_.wait(lock, [&] { return !timing_ && timers_waiting_ == 0 && memory_waiters_ == 0; });
      if (!fits()) {
        ++memory_waiters_;
        changed_.wait(lock, [&] { return !timing_ && timers_waiting_ == 0 && fits(); });
        --memory_waiters_;
      }
      ++verifying_;
      reserved_ += bytes;
    }
    void unlock_shared(std::uint64_t bytes = 0) {
      const std::lock_guard lock(mutex_);
      --verifying_;
      reserved_ -= bytes;
      changed_.notify_all();
    }
    void lock() {
      std::unique_lock lock(mutex_);
      ++timers_waiting_;
      changed_.wait(lock, [&] { return !timing_ && verifying_ == 0; });
      --timers_waiting_;
      timing_ = true;
    }
    void unlock() {
      const std::lock_guard lock(mutex_);
      timing_ = false;
      changed_.notify_all();
    }

   private:
    std::mutex mutex_;
    std::condition_variable changed_;
    std::size_t verifying_ = 0;
    std::size_t timers_waiting_ = 0;
    std::size_t memory_waiters_ = 0;
    std::uint64_t reserved_ = 0;
    bool timing_ = false;
  };

  /// What the request is, whoever evaluates it: the cache keeps results under this, then
  /// under the environment that evaluated them.
  static std::string cache_key(const EvaluationRequest& request, const std::map<std::string, std::string>& files) {
    detail::Sha256 hash;
    hash.update("task\n").update(request.task.content_hash()).update("\npolicy\n").update(request.policy.dump());
    hash.update("\nfiles\n");
    for (const auto& [path, content] : files)
      hash.update(path).update(std::string(1, '\0')).update(std::to_string(content.size())).update(content);
    return hash.hex_digest();
  }

  /// Under the lock: the cached result of the request `key` names, from an environment that
  /// could evaluate it now (counted as a cache hit), or nothing.
  std::optional<PoolResult> cache_hit(const std::string& key) {
    const auto entries = cache_.find(key);
    if (entries == cache_.end()) return std::nullopt;
    for (const auto& [environment, cached] : entries->second) {
      if (!evaluates_in(environment)) continue;
      PoolResult result = cached;
      result.cached = true;
      result.queued_for = result.building_for = result.on_device_for = std::chrono::milliseconds{0};
      ++counters_.cache_hits;
      ++counters_.evaluated;
      return result;
    }
    return std::nullopt;
  }

  /// Under the lock: whether this pool's slots, or a remote worker that takes requests,
  /// evaluate in `environment`.
  [[nodiscard]] bool evaluates_in(const std::string& environment) const {
    if (!options_.slots.empty() && environment == options_.environment) return true;
    return std::any_of(remote_workers_.begin(), remote_workers_.end(), [&](const auto& entry) {
      const RemoteWorker& worker = entry.second;
      return worker.quarantined.empty() && !worker.registration.environment.empty() &&
             worker.registration.environment == environment;
    });
  }

  /// Whether `a` goes before `b`: the higher priority, then the earlier deadline, then the
  /// earlier arrival.
  static bool goes_before(const Job& a, const Job& b) {
    if (a.request.priority != b.request.priority) return a.request.priority > b.request.priority;
    const auto deadline = [](const Job& job) {
      return job.request.deadline.value_or(std::chrono::steady_clock::time_point::max());
    };
    if (deadline(a) != deadline(b)) return deadline(a) < deadline(b);
    return a.sequence < b.sequence;
  }

  static JobQueue::iterator first_of(JobQueue& queue) {
    return std::min_element(queue.begin(), queue.end(),
                            [](const auto& a, const auto& b) { return goes_before(*a, *b); });
  }

  /// The job of `queue` that goes first among those `eligible` accepts (end: none).
  template <class Eligible>
  static JobQueue::iterator first_of(JobQueue& queue, Eligible eligible) {
    auto first = queue.end();
    for (auto job = queue.begin(); job != queue.end(); ++job)
      if (eligible(**job) && (first == queue.end() || goes_before(**job, **first))) first = job;
    return first;
  }

  static bool take_from(JobQueue& queue, const std::shared_ptr<Job>& job) {
    const auto found = std::find(queue.begin(), queue.end(), job);
    if (found == queue.end()) return false;
    queue.erase(found);
    return true;
  }

  static bool expired(const Job& job) {
    return job.request.deadline && std::chrono::steady_clock::now() > *job.request.deadline;
  }

  static std::chrono::milliseconds since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  }

  std::size_t& count_of(PoolStage stage) {
    switch (stage) {
      case PoolStage::queued:
        return counters_.queued;
      case PoolStage::building:
        return counters_.building;
      case PoolStage::waiting_for_slot:
        return counters_.waiting_for_slot;
      case PoolStage::verifying:
        return counters_.verifying;
      case PoolStage::timing:
        return counters_.timing;
      case PoolStage::on_worker:
        return counters_.on_worker;
      case PoolStage::finished:
        break;
    }
    return unused_count_;
  }

  /// Under the lock.
  void move_to(const std::shared_ptr<Job>& job, PoolStage stage, std::vector<PoolEvent>& events) {
    --count_of(job->stage);
    job->stage = stage;
    ++count_of(stage);
    job->stage_started = std::chrono::steady_clock::now();
    events.push_back(PoolEvent{job->id, stage, std::nullopt, job->device, ++events_made_, nullptr});
  }

  /// Under the lock: the job's result, its counters, the cache, its event.
  void finish(std::unique_lock<std::mutex>&, const std::shared_ptr<Job>& job, PoolOutcome outcome, std::string message,
              std::vector<PoolEvent>& events) {
    PoolResult result;
    result.id = job->id;
    if (job->prepared) result.evaluation = std::move(job->prepared->evaluation);
    if (job->remote_evaluation) result.evaluation = std::move(job->remote_evaluation);
    if (!job->lease.empty()) release_lease(*job);
    if (const auto harness = harness_failure(outcome, result.evaluation)) {
      outcome = PoolOutcome::infrastructure_error;
      message = harness->message;
    }
    job->infrastructure_failure = outcome == PoolOutcome::infrastructure_error;
    result.outcome = outcome;
    result.message = std::move(message);
    result.device = job->device;
    result.queued_for = job->queued_for;
    result.building_for = job->building_for;
    result.on_device_for = job->on_device_for;
    --count_of(job->stage);
    job->stage = PoolStage::finished;
    switch (outcome) {
      case PoolOutcome::evaluated:
        ++counters_.evaluated;
        break;
      case PoolOutcome::infrastructure_error:
        ++counters_.infrastructure_errors;
        break;
      case PoolOutcome::cancelled:
        ++counters_.cancelled;
        break;
      case PoolOutcome::expired:
        ++counters_.expired;
        break;
    }
    if (outcome == PoolOutcome::evaluated && !job->cache_key.empty() && job->environment)
      cache_[job->cache_key].insert_or_assign(*job->environment, result);
    events.push_back(PoolEvent{job->id, PoolStage::finished, outcome, job->device, ++events_made_,
                               std::make_shared<const PoolResult>(result)});
    job->prepared.reset();
    job->promise.set_value(std::move(result));
    jobs_.erase(job->id);
    if (jobs_.empty()) idle_.notify_all();
  }

  void cancel_waiting() {
    std::vector<PoolEvent> events;
    {
      std::unique_lock lock(mutex_);
      for (JobQueue* queue : {&build_queue_, &slot_queue_}) {
        const JobQueue waiting = std::move(*queue);
        queue->clear();
        for (const auto& job : waiting)
          finish(lock, job, PoolOutcome::cancelled, "the pool closed before it ran", events);
      }
      const auto leased = leases_;
      for (const auto& [lease, job] : leased)
        finish(lock, job, PoolOutcome::cancelled, "the pool closed while a remote worker held it", events);
    }
    emit(events);
  }

  /// Under the lock: a job taken from a queue that must not go on (cancelled, or past its
  /// deadline) is finished here; true if it was.
  bool stopped_here(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Job>& job,
                    std::vector<PoolEvent>& events) {
    if (job->cancel_requested) {
      finish(lock, job, PoolOutcome::cancelled, "cancelled", events);
      return true;
    }
    if (expired(*job)) {
      finish(lock, job, PoolOutcome::expired, std::string("its deadline passed while it was ") + to_string(job->stage),
             events);
      return true;
    }
    return false;
  }

  /// Waits for the first job of `queue` and moves it to `stage` (on `device`, when the stage
  /// has one): nothing when the pool stops, a null job when that one was cancelled or
  /// expired meanwhile (finished here).
  std::optional<std::shared_ptr<Job>> take_next(const std::stop_token& stop, JobQueue& queue, const std::string& device,
                                                PoolStage stage, std::vector<PoolEvent>& events) {
    std::unique_lock lock(mutex_);
    work_.wait(lock, stop, [&] { return !queue.empty(); });
    if (stop.stop_requested()) return std::nullopt;
    const auto first = first_of(queue);
    std::shared_ptr<Job> job = *first;
    queue.erase(first);
    if (stage == PoolStage::building) job->queued_for = since(job->accepted);
    if (!device.empty()) job->device = device;
    if (stopped_here(lock, job, events)) return std::shared_ptr<Job>{};
    move_to(job, stage, events);
    return job;
  }

  void build_loop(const std::stop_token& stop) {
    while (true) {
      std::vector<PoolEvent> events;
      std::optional<std::shared_ptr<Job>> next = take_next(stop, build_queue_, {}, PoolStage::building, events);
      if (!next) return;
      std::shared_ptr<Job> job = std::move(*next);
      emit(events);
      if (!job) continue;
      std::optional<PreparedCandidate> prepared;
      std::string failure;
      try {
        prepared = builder_.prepare(job->request.task, job->directory, job->policy);
      } catch (const std::exception& error) {
        failure = std::string("the build stage failed (not the candidate's fault): ") + error.what();
      }
      events.clear();
      {
        std::unique_lock lock(mutex_);
        job->building_for = since(job->stage_started);
        job->prepared = std::move(prepared);
        if (!failure.empty())
          finish(lock, job, PoolOutcome::infrastructure_error, std::move(failure), events);
        else if (!job->prepared->ready())
          finish(lock, job, PoolOutcome::evaluated, {}, events);
        else if (!stopped_here(lock, job, events)) {
          move_to(job, PoolStage::waiting_for_slot, events);
          slot_queue_.push_back(job);
        }
      }
      work_.notify_all();
      emit(events);
    }
  }

  void slot_loop(const std::stop_token& stop, std::size_t index) {
    const std::string device = options_.slots[index].device_name();
    while (true) {
      std::vector<PoolEvent> events;
      std::optional<std::shared_ptr<Job>> next = take_next(stop, slot_queue_, device, PoolStage::verifying, events);
      if (!next) return;
      std::shared_ptr<Job> job = std::move(*next);
      emit(events);
      if (!job) continue;
      admit_by_memory(*job);
      const auto started = std::chrono::steady_clock::now();
      std::string failure = run_stage(index, *job, /*timing=*/false);
      learn_memory(*job);
      bool failed = !failure.empty();
      events.clear();
      bool time_it = false;
      {
        std::unique_lock lock(mutex_);
        const PreparedCandidate& prepared = *job->prepared;
        const bool correct = prepared.evaluation.verification && prepared.evaluation.verification->correct;
        job->on_device_for = since(started);
        if (!failed && !job->alone && shares_device(index) && out_of_memory(prepared.evaluation)) {
          // Memory the other work on the device held: not the candidate's failure until it
          // fails alone too.
          job->prepared->evaluation.verification.reset();
          job->alone = true;
          ++counters_.retried_alone;
          record_busy(device, started);
          move_to(job, PoolStage::waiting_for_slot, events);
          slot_queue_.push_back(job);
          lock.unlock();
          work_.notify_all();
          emit(events);
          continue;
        }
        if (failed)
          finish(lock, job, PoolOutcome::infrastructure_error, std::move(failure), events);
        else if (!correct || !job->request.timing)
          finish(lock, job, PoolOutcome::evaluated, {}, events);
        else if (!stopped_here(lock, job, events)) {
          move_to(job, PoolStage::timing, events);
          time_it = true;
        }
        if (!time_it) record_busy(device, started);
      }
      emit(events);
      if (!time_it) {
        if (job->infrastructure_failure) replace_evaluator(index);
        continue;
      }
      failure = run_stage(index, *job, /*timing=*/true);
      failed = !failure.empty();
      events.clear();
      {
        std::unique_lock lock(mutex_);
        job->on_device_for = since(started);
        record_busy(device, started);
        if (failed)
          finish(lock, job, PoolOutcome::infrastructure_error, std::move(failure), events);
        else
          finish(lock, job, PoolOutcome::evaluated, {}, events);
      }
      emit(events);
      if (job->infrastructure_failure) replace_evaluator(index);
    }
  }

  /// Verification (shared with the device's other slots) or timing (alone on the device);
  /// what failed, if the stage threw.
  std::string run_stage(std::size_t index, Job& job, bool timing) {
    DeviceGate& gate = *gates_.at(options_.slots[index].device_name());
    try {
      if (timing) {
        const std::lock_guard exclusive(gate);
        slot_evaluators_[index].profile(*job.prepared);
      } else if (job.alone) {
        const std::lock_guard exclusive(gate);
        slot_evaluators_[index].verify(*job.prepared);
      } else {
        gate.lock_shared(job.memory_estimate, options_.device_memory_bytes);
        struct Release {
          DeviceGate& gate;
          std::uint64_t bytes;
          ~Release() { gate.unlock_shared(bytes); }
        } release{gate, job.memory_estimate};
        slot_evaluators_[index].verify(*job.prepared);
      }
    } catch (const std::exception& error) {
      return std::string("the ") + (timing ? "timing" : "verification") +
             " stage failed (not the candidate's fault): " + error.what();
    }
    return {};
  }

  /// With a memory budget: how a verification is admitted. A task whose memory is not known,
  /// or that fits beside nothing, has the device to itself.
  void admit_by_memory(Job& job) {
    if (options_.device_memory_bytes == 0 || job.alone) return;
    const std::lock_guard lock(mutex_);
    const auto known = task_memory_.find(job.request.task.content_hash());
    if (known != task_memory_.end() && known->second <= options_.device_memory_bytes) {
      job.memory_estimate = known->second;
      return;
    }
    job.alone = true;
    ++counters_.admitted_alone;
  }

  /// What a verification reported of its task's memory, kept for the next ones: twice the
  /// reference's peak on the device (the candidate's process holds as much again), or, where
  /// no device peak is known, twice its parameters, inputs and outputs.
  void learn_memory(const Job& job) {
    if (options_.device_memory_bytes == 0 || !job.prepared || !job.prepared->evaluation.verification) return;
    const nlohmann::json& details = job.prepared->evaluation.verification->details;
    const auto footprint = details.find("footprint");
    if (footprint == details.end() || !footprint->is_object()) return;
    const auto bytes = [&](const char* key) {
      const auto value = footprint->find(key);
      return value != footprint->end() && value->is_number() ? value->get<std::uint64_t>() : std::uint64_t{0};
    };
    std::uint64_t held = bytes("peak_device_bytes");
    if (held == 0) held = bytes("parameter_bytes") + bytes("input_bytes") + bytes("output_bytes");
    if (held == 0) return;
    const std::lock_guard lock(mutex_);
    std::uint64_t& estimate = task_memory_[job.request.task.content_hash()];
    estimate = std::max(estimate, 2 * held);
  }

  /// Whether another slot runs on the device of slot `index`.
  [[nodiscard]] bool shares_device(std::size_t index) const {
    const std::string device = options_.slots[index].device_name();
    return std::count_if(options_.slots.begin(), options_.slots.end(),
                         [&](const PoolSlot& slot) { return slot.device_name() == device; }) > 1;
  }

  /// A verdict that says the device's memory ran out (torch's "CUDA out of memory", an
  /// allocation that failed in the candidate's process).
  [[nodiscard]] static bool out_of_memory(const Evaluation& evaluation) {
    const auto rejection = evaluation.rejection();
    return rejection && is_out_of_device_memory(*rejection);
  }

  /// Under the lock.
  void record_busy(const std::string& device, std::chrono::steady_clock::time_point started) {
    counters_.busy[device] += since(started);
  }

  /// The harness's own failure in an evaluated verdict (not the candidate's: an
  /// infrastructure error), if it is one.
  [[nodiscard]] static std::optional<Rejection> harness_failure(PoolOutcome outcome,
                                                                const std::optional<Evaluation>& evaluation) {
    if (outcome != PoolOutcome::evaluated || !evaluation) return std::nullopt;
    std::optional<Rejection> rejection = evaluation->rejection();
    if (!rejection || rejection->reason != RejectionReason::harness_error) return std::nullopt;
    return rejection;
  }

  /// A fresh evaluator for a slot whose stage failed (its workers may be lost or wedged).
  void replace_evaluator(std::size_t index) {
    try {
      slot_evaluators_[index] = make_evaluator_(options_.slots[index]);
    } catch (const std::exception&) {
      // Keep the old one: the next request on this slot tells whether it still works.
    }
  }

  struct RemoteWorker {
    WorkerRegistration registration;
    std::chrono::steady_clock::time_point last_heard;
    std::set<std::string> leases;
    /// Leases whose requests were cancelled, not told yet.
    std::vector<std::string> cancelled;
    /// Its last results that were infrastructure errors, in a row.
    std::size_t failures_in_a_row = 0;
    /// Why it was quarantined (it gets no more requests); empty while it takes them.
    std::string quarantined;
  };

  [[nodiscard]] std::chrono::milliseconds heartbeat_interval() const {
    return std::max(std::chrono::milliseconds{10}, options_.worker_timeout / 3);
  }

  /// Under the lock: the worker, heard from now (throws UnknownWorker).
  RemoteWorker& heard_from(const std::string& worker) {
    const auto found = remote_workers_.find(worker);
    if (found == remote_workers_.end())
      throw UnknownWorker("no remote worker '" + worker +
                          "' is registered (lost, gone or never known): register again");
    found->second.last_heard = std::chrono::steady_clock::now();
    return found->second;
  }

  /// Under the lock: a finished or cancelled job's lease is no longer its worker's; a
  /// cancelled one is told to the worker at its next heartbeat.
  void release_lease(Job& job) {
    leases_.erase(job.lease);
    if (const auto holder = remote_workers_.find(job.worker); holder != remote_workers_.end()) {
      if (holder->second.leases.erase(job.lease) > 0 && job.cancel_requested)
        holder->second.cancelled.push_back(job.lease);
    }
    job.lease.clear();
    job.worker.clear();
  }

  /// Under the lock: a job a remote worker held goes back to the queue, as it was.
  // By value: the caller's pointer may be the lease table's own, which releasing the lease erases.
  void requeue(std::shared_ptr<Job> job,  // NOLINT(performance-unnecessary-value-param)
               std::vector<PoolEvent>& events) {
    release_lease(*job);
    job->device.clear();
    job->environment = options_.environment;
    job->remote_evaluation.reset();
    ++counters_.requeued;
    move_to(job, PoolStage::queued, events);
    build_queue_.push_back(job);
  }

  /// Under the lock: whether remote worker `worker` may take `job` (it has not failed it).
  [[nodiscard]] static bool may_take(const Job& job, const std::string& worker) {
    return !job.failed_on.contains(worker);
  }

  /// Under the lock: whether this pool's slots, or a remote worker that takes requests and
  /// has not failed `job`, could evaluate it.
  [[nodiscard]] bool another_may_take(const Job& job) const {
    return !options_.slots.empty() ||
           std::any_of(remote_workers_.begin(), remote_workers_.end(), [&](const auto& entry) {
             return entry.second.quarantined.empty() && may_take(job, entry.first);
           });
  }

  /// Under the lock: the worker gets no more requests, and is told to stop what it holds,
  /// which goes back to the queue.
  void quarantine(RemoteWorker& worker, const std::string& why, std::vector<PoolEvent>& events) {
    worker.quarantined = why;
    ++counters_.quarantined;
    ++counters_.quarantines;
    const std::set<std::string> held = worker.leases;
    worker.cancelled.insert(worker.cancelled.end(), held.begin(), held.end());
    for (const std::string& lease : held) requeue(leases_.at(lease), events);
  }

  /// Under the lock: the worker is gone, and what it held goes back to the queue.
  void forget_worker(const std::string& worker, std::vector<PoolEvent>& events) {
    const RemoteWorker& gone = remote_workers_.at(worker);
    if (!gone.quarantined.empty()) --counters_.quarantined;
    const std::set<std::string> held = gone.leases;
    for (const std::string& lease : held) requeue(leases_.at(lease), events);
    remote_workers_.erase(worker);
    counters_.workers = remote_workers_.size();
  }

  /// Forgets the remote workers not heard from within the timeout.
  void watch_workers(const std::stop_token& stop) {
    std::mutex sleeping;
    std::condition_variable_any woken;
    while (!stop.stop_requested()) {
      {
        std::unique_lock lock(sleeping);
        woken.wait_for(lock, stop, heartbeat_interval() / 2, [] { return false; });
      }
      std::vector<PoolEvent> events;
      {
        const std::lock_guard lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        std::vector<std::string> lost;
        for (const auto& [id, worker] : remote_workers_)
          if (now - worker.last_heard > options_.worker_timeout) lost.push_back(id);
        for (const std::string& id : lost) forget_worker(id, events);
      }
      if (!events.empty()) {
        work_.notify_all();
        emit(events);
      }
    }
  }

  /// Delivers events in the order of their numbers, which they got under the pool's lock:
  /// threads emit outside that lock, so a later event may arrive here first and wait for the
  /// earlier ones. One thread delivers at a time; a callback that causes events (a cancel)
  /// leaves them to the delivering thread instead of waiting for itself.
  void emit(std::vector<PoolEvent>& events) {
    if (!options_.on_event) return;
    std::unique_lock lock(delivery_mutex_);
    for (PoolEvent& event : events) undelivered_.emplace(event.sequence, std::move(event));
    events.clear();
    if (delivering_) return;
    delivering_ = true;
    while (!undelivered_.empty() && undelivered_.begin()->first == events_delivered_ + 1) {
      PoolEvent next = std::move(undelivered_.begin()->second);
      undelivered_.erase(undelivered_.begin());
      ++events_delivered_;
      lock.unlock();
      try {
        options_.on_event(next);
      } catch (...) {
        // A callback's failure is its own; the pool and the other events go on.
      }
      lock.lock();
    }
    delivering_ = false;
  }

  EvaluationPoolOptions options_;
  AnyStagedEvaluator builder_;
  SlotEvaluatorFactory make_evaluator_;
  std::vector<AnyStagedEvaluator> slot_evaluators_;
  std::map<std::string, std::unique_ptr<DeviceGate>> gates_;

  mutable std::mutex mutex_;
  std::condition_variable_any work_;
  std::condition_variable_any idle_;
  bool closing_ = false;
  std::uint64_t submitted_ = 0;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  JobQueue build_queue_;
  JobQueue slot_queue_;
  /// Results by request (`cache_key`), then by the environment that evaluated them.
  std::map<std::string, std::map<std::string, PoolResult>> cache_;
  /// Device memory a verification of each task needs, by the task's content hash.
  std::map<std::string, std::uint64_t> task_memory_;
  PoolCounters counters_;
  std::map<std::string, RemoteWorker> remote_workers_;
  /// Requests on remote workers, by lease.
  std::map<std::string, std::shared_ptr<Job>> leases_;
  std::uint64_t workers_registered_ = 0;
  std::size_t unused_count_ = 0;
  std::uint64_t events_made_ = 0;  // under mutex_

  std::mutex delivery_mutex_;
  std::map<std::uint64_t, PoolEvent> undelivered_;
  std::uint64_t events_delivered_ = 0;
  bool delivering_ = false;

  // Last: they stop and join first when the pool goes.
  std::vector<std::jthread> workers_;
};

}  // namespace cuda_agent
