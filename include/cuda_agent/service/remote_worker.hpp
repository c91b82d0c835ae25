// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `RemoteWorker`: the devices of one machine serving a coordinator's pool. It runs an
/// `EvaluationPool` of its own (its slots, sandbox and caches), registers with the
/// coordinator, takes requests up to its free capacity, and sends back each result; what
/// `cuda-agent worker` runs.
///
/// A coordinator that cannot be reached is tried again with back-off, and results wait for
/// it. A coordinator that no longer knows the worker (it was thought lost) has put what the
/// worker held back in its queue: the worker drops that work, registers again and goes on.
/// Stopping tells the coordinator, which gives what the worker held to others.

#include <algorithm>           // min, max
#include <chrono>              // steady_clock, milliseconds
#include <condition_variable>  // condition_variable_any
#include <cstddef>             // size_t
#include <deque>               // deque
#include <exception>           // exception
#include <filesystem>          // path, remove_all, temp_directory_path
#include <functional>          // function
#include <map>                 // map
#include <memory>              // unique_ptr
#include <mutex>               // mutex, unique_lock, lock_guard
#include <stop_token>          // stop_token, stop_source, stop_callback
#include <string>              // string
#include <system_error>        // error_code
#include <thread>              // jthread
#include <utility>             // move
#include <vector>              // vector

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/service/evaluation_pool.hpp"
#include "cuda_agent/service/worker_protocol.hpp"

namespace cuda_agent {

struct RemoteWorkerOptions {
  /// How the worker presents itself; a capacity of 0 means twice its pool's slots (one
  /// candidate building while another is on the device), an empty environment its pool's
  /// (`EvaluationPoolOptions::environment`: what its verdicts depend on).
  WorkerRegistration registration{"worker", 0, nlohmann::json::object(), {}};
  /// How long one call for work waits while the coordinator has none.
  std::chrono::milliseconds lease_wait{5'000};
  /// The pause after a failed call to the coordinator, doubling from the first to the last.
  std::chrono::milliseconds retry_first{200};
  std::chrono::milliseconds retry_last{5'000};
  /// A result that could not be sent for this long is dropped: the coordinator has long
  /// given its request to another worker by then.
  std::chrono::milliseconds give_up_after{120'000};
  /// Lines for people (registered, the coordinator lost and found again), from any thread.
  std::function<void(const std::string&)> on_notice;
  /// Each result of the worker's pool, by lease, before it is sent (from the pool's threads).
  std::function<void(const std::string& lease, const PoolResult&)> on_result;
};

struct RemoteWorkerCounters {
  /// Requests taken, results the coordinator counted, and results dropped (their lease was
  /// no longer this worker's, or the coordinator could not be reached in time).
  std::size_t leased = 0, sent = 0, dropped = 0;
  /// Registrations (more than one: the coordinator lost the worker and took it back).
  std::size_t registrations = 0;
  /// Calls to the coordinator that failed to reach it.
  std::size_t failed_calls = 0;
};

template <CoordinatorLink Link>
class RemoteWorker {
 public:
  /// `pool_options`, `builder` and `slot_evaluator` as `EvaluationPool` takes them, for the
  /// worker's own pool (its `on_event` is the worker's).
  RemoteWorker(Link link, EvaluationPoolOptions pool_options, AnyStagedEvaluator builder,
               EvaluationPool::SlotEvaluatorFactory slot_evaluator, RemoteWorkerOptions options = {})
      : link_(std::move(link)), options_(std::move(options)) {
    if (options_.registration.capacity == 0) options_.registration.capacity = 2 * pool_options.slots.size();
    if (options_.registration.capacity == 0) throw std::invalid_argument("a remote worker needs slots");
    if (options_.registration.environment.empty()) options_.registration.environment = pool_options.environment;
    pool_options.remote_workers = false;
    pool_options.max_pending = std::max(pool_options.max_pending, options_.registration.capacity);
    pool_options.on_event = [this](const PoolEvent& event) { on_pool_event(event); };
    staging_ = std::filesystem::temp_directory_path() / ("cuda-agent-worker-" + detail::random_hex(6));
    detail::make_open_directory(staging_);
    pool_ = std::make_unique<EvaluationPool>(std::move(pool_options), std::move(builder), std::move(slot_evaluator));
  }

  RemoteWorker(const RemoteWorker&) = delete;
  RemoteWorker& operator=(const RemoteWorker&) = delete;

  ~RemoteWorker() {
    pool_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(staging_, ignored);
  }

  /// Serves the coordinator until `stop` is requested, or it refuses the worker for good
  /// (`refusal()` says why); then deregisters, so that the
  /// coordinator gives what this worker held to others, and cancels it here.
  void run(const std::stop_token& stop) {
    std::stop_source inner;
    const std::stop_callback forward(stop, [&inner] { inner.request_stop(); });
    {
      std::jthread heartbeats([this, token = inner.get_token()] { heartbeat_loop(token); });
      std::jthread sender([this, token = inner.get_token()] { send_loop(token); });
      serve(inner.get_token());
      inner.request_stop();
      changed_.notify_all();
    }
    std::string worker;
    std::vector<std::string> held;
    {
      const std::lock_guard lock(mutex_);
      worker = std::exchange(worker_, {});
      for (const auto& [lease, generation] : held_) held.push_back(lease);
    }
    if (!worker.empty()) {
      try {
        (void)link_.deregister_worker(worker);
      } catch (const std::exception& error) {
        notice(std::string("could not deregister (the coordinator finds this worker lost): ") + error.what());
      }
    }
    for (const std::string& lease : held) (void)pool_->cancel(lease);
  }

  [[nodiscard]] RemoteWorkerCounters counters() const {
    const std::lock_guard lock(mutex_);
    return counters_;
  }

  /// The id the coordinator gave it; empty while it is not registered.
  [[nodiscard]] std::string worker_id() const {
    const std::lock_guard lock(mutex_);
    return worker_;
  }

  /// Why the coordinator refused the worker for good (`run` returned by itself); empty otherwise.
  [[nodiscard]] std::string refusal() const {
    const std::lock_guard lock(mutex_);
    return refusal_;
  }

  /// Its own pool's counters.
  [[nodiscard]] PoolCounters pool_counters() const { return pool_->counters(); }

 private:
  struct Outgoing {
    std::string lease;
    std::size_t generation = 0;
    PoolResult result;
    std::chrono::steady_clock::time_point since;
  };

  void notice(const std::string& line) const {
    if (options_.on_notice) options_.on_notice(line);
  }

  /// Sleeps `pause` (or until stopped), and doubles it up to the last retry pause.
  bool back_off(const std::stop_token& stop, std::chrono::milliseconds& pause) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, stop, pause, [] { return false; });
    pause = std::min(pause * 2, options_.retry_last);
    return !stop.stop_requested();
  }

  void serve(const std::stop_token& stop) {
    std::chrono::milliseconds pause = options_.retry_first;
    while (!stop.stop_requested()) {
      std::string worker;
      std::size_t generation = 0;
      std::size_t room = 0;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, stop, [&] { return worker_.empty() || held_.size() < options_.registration.capacity; });
        if (stop.stop_requested()) return;
        worker = worker_;
        generation = generation_;
        room = options_.registration.capacity - std::min(held_.size(), options_.registration.capacity);
      }
      try {
        if (worker.empty()) {
          register_again();
          pause = options_.retry_first;
          continue;
        }
        const auto asked = std::chrono::steady_clock::now();
        std::vector<WorkerLease> leases = link_.lease(worker, room, options_.lease_wait);
        // Nothing, and at once: the coordinator is closing (draining), not waiting for work.
        // Asking again right away would only load it.
        if (leases.empty() && std::chrono::steady_clock::now() - asked < options_.lease_wait / 4) {
          if (!back_off(stop, pause)) return;
          continue;
        }
        pause = options_.retry_first;
        for (WorkerLease& lease : leases) start(std::move(lease), generation);
      } catch (const UnknownWorker&) {
        lost(generation);
      } catch (const CoordinatorRefusal& error) {
        notice(std::string("the coordinator refuses this worker; stopping: ") + error.what());
        const std::lock_guard lock(mutex_);
        refusal_ = error.what();
        return;
      } catch (const std::exception& error) {
        failed_call("could not reach the coordinator", error);
        if (!back_off(stop, pause)) return;
      }
    }
  }

  void register_again() {
    const WorkerGrant grant = link_.register_worker(options_.registration);
    {
      const std::lock_guard lock(mutex_);
      worker_ = grant.worker;
      heartbeat_interval_ = grant.heartbeat_interval;
      ++generation_;
      ++counters_.registrations;
      reachable_ = true;
    }
    changed_.notify_all();
    notice("registered with the coordinator as " + grant.worker + " (capacity " +
           std::to_string(options_.registration.capacity) + ")");
  }

  void failed_call(const std::string& what, const std::exception& error) {
    bool first = false;
    {
      const std::lock_guard lock(mutex_);
      ++counters_.failed_calls;
      first = std::exchange(reachable_, false);
    }
    if (first) notice(what + " (trying again with back-off): " + error.what());
  }

  /// The coordinator no longer knows registration `generation`: it has re-queued what that
  /// registration held, so that work is dropped here, and the worker registers again.
  void lost(std::size_t generation) {
    std::vector<std::string> cancelled;
    {
      const std::lock_guard lock(mutex_);
      if (generation != generation_ || worker_.empty()) return;
      notice("the coordinator lost this worker (" + worker_ + "): dropping what it held and registering again");
      worker_.clear();
      for (auto held = held_.begin(); held != held_.end();)
        if (held->second == generation) {
          cancelled.push_back(held->first);
          held = held_.erase(held);
        } else {
          ++held;
        }
      std::erase_if(outbox_, [&](const Outgoing& outgoing) { return outgoing.generation == generation; });
    }
    changed_.notify_all();
    for (const std::string& lease : cancelled) (void)pool_->cancel(lease);
  }

  /// Hands a lease to the worker's pool (a failure to is sent back as the infrastructure's).
  void start(WorkerLease lease, std::size_t generation) {
    {
      const std::lock_guard lock(mutex_);
      held_.emplace(lease.lease, generation);
      ++counters_.leased;
    }
    const std::filesystem::path directory = staging_ / lease.lease;
    try {
      detail::make_open_directory(directory);
      write_candidate_sources(lease.files, directory);
      EvaluationRequest request;
      request.id = lease.lease;
      request.task = std::move(lease.task);
      request.candidate_directory = directory;
      request.policy = std::move(lease.policy);
      request.timing = lease.timing;
      request.priority = lease.priority;
      if (lease.time_left) request.deadline = std::chrono::steady_clock::now() + *lease.time_left;
      (void)pool_->submit(std::move(request));  // copies the files: the staging copy can go
    } catch (const std::exception& error) {
      PoolResult result;
      result.id = lease.lease;
      result.outcome = PoolOutcome::infrastructure_error;
      result.message = std::string("the worker could not start the evaluation: ") + error.what();
      finished(lease.lease, std::move(result));
    }
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }

  void on_pool_event(const PoolEvent& event) {
    if (event.stage == PoolStage::finished && event.result) finished(event.id, *event.result);
  }

  void finished(const std::string& lease, PoolResult result) {
    if (options_.on_result) options_.on_result(lease, result);
    {
      const std::lock_guard lock(mutex_);
      const auto held = held_.find(lease);
      if (held == held_.end()) return;  // dropped: the coordinator gave it to others
      outbox_.push_back(Outgoing{lease, held->second, std::move(result), std::chrono::steady_clock::now()});
      held_.erase(held);
    }
    changed_.notify_all();
  }

  void send_loop(const std::stop_token& stop) {
    std::chrono::milliseconds pause = options_.retry_first;
    while (true) {
      Outgoing outgoing;
      std::string worker;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, stop, [&] { return !outbox_.empty() && !worker_.empty(); });
        if (stop.stop_requested()) return;
        outgoing = std::move(outbox_.front());
        outbox_.pop_front();
        if (outgoing.generation != generation_) {
          ++counters_.dropped;
          continue;
        }
        worker = worker_;
      }
      try {
        const bool counted = link_.complete(worker, outgoing.lease, outgoing.result);
        pause = options_.retry_first;
        const std::lock_guard lock(mutex_);
        ++(counted ? counters_.sent : counters_.dropped);
        reachable_ = true;
      } catch (const UnknownWorker&) {
        {
          const std::lock_guard lock(mutex_);
          ++counters_.dropped;
        }
        lost(outgoing.generation);
      } catch (const std::exception& error) {
        failed_call("could not send a result to the coordinator", error);
        const bool too_late = std::chrono::steady_clock::now() - outgoing.since > options_.give_up_after;
        {
          const std::lock_guard lock(mutex_);
          if (too_late)
            ++counters_.dropped;
          else
            outbox_.push_front(std::move(outgoing));
        }
        if (!back_off(stop, pause)) return;
      }
    }
  }

  void heartbeat_loop(const std::stop_token& stop) {
    std::size_t seen = 0;  // the registration whose interval the wait below keeps
    while (true) {
      std::string worker;
      std::size_t generation = 0;
      {
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, stop, heartbeat_interval_, [&] { return generation_ != seen; });
        if (stop.stop_requested()) return;
        if (generation_ != seen) {
          seen = generation_;
          continue;
        }
        worker = worker_;
        generation = generation_;
      }
      if (worker.empty()) continue;
      try {
        for (const std::string& lease : link_.heartbeat(worker)) {
          {
            const std::lock_guard lock(mutex_);
            held_.erase(lease);
          }
          changed_.notify_all();
          (void)pool_->cancel(lease);
        }
      } catch (const UnknownWorker&) {
        lost(generation);
      } catch (const std::exception& error) {
        failed_call("could not send a heartbeat to the coordinator", error);
      }
    }
  }

  Link link_;
  RemoteWorkerOptions options_;
  std::filesystem::path staging_;

  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  std::string worker_;
  std::size_t generation_ = 0;
  std::chrono::milliseconds heartbeat_interval_{10'000};
  bool reachable_ = true;
  std::string refusal_;
  /// Leases in the worker's pool, with the registration that took them.
  std::map<std::string, std::size_t> held_;
  std::deque<Outgoing> outbox_;
  RemoteWorkerCounters counters_;

  // Last: it goes first, and its events (which come here) stop before the rest goes.
  std::unique_ptr<EvaluationPool> pool_;
};

}  // namespace cuda_agent
