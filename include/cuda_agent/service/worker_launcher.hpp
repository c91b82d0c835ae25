// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Worker processes started by a cluster's engine (Ray, Slurm) rather than by hand: the
/// `WorkerLauncher` concept (an engine that starts a command with an environment and
/// resources, says how each job stands, and stops it), `AnyWorkerLauncher` to hold one at
/// run time, and `WorkerFleet`, which keeps a number of such jobs alive for a coordinator.
///
/// Placing the processes on machines and GPUs is the engine's; so is starting them. The
/// fleet only asks for a replacement when a job has ended without being told to, or when
/// the host asks it to replace a worker that runs but is no use (`replace`: its coordinator
/// quarantined it), with a back-off and a cap on replacements per time window, so that a
/// command that crashes at once does not become a loop of submissions. Which worker serves which request stays the
/// coordinator's (`EvaluationPool` with `remote_workers`): a worker lost in the middle of a
/// batch has its requests given to the others whether or not it is replaced.

#include <algorithm>           // min, max, find_if
#include <chrono>              // steady_clock, milliseconds
#include <concepts>            // same_as
#include <condition_variable>  // condition_variable_any
#include <cstddef>             // size_t
#include <deque>               // deque
#include <exception>           // exception
#include <functional>          // function
#include <map>                 // map
#include <memory>              // unique_ptr, make_unique
#include <mutex>               // mutex, unique_lock, lock_guard
#include <span>                // span
#include <stdexcept>           // invalid_argument, runtime_error
#include <stop_token>          // stop_token
#include <string>              // string, to_string
#include <thread>              // jthread, sleep_for
#include <type_traits>         // remove_cvref_t, is_same_v
#include <utility>             // move, forward, exchange
#include <vector>              // vector

#include <nlohmann/json.hpp>

namespace cuda_agent {

/// One worker process for an engine to start.
struct WorkerLaunch {
  /// Unique among every launch the engine has seen (Ray refuses a submission id twice).
  std::string name;
  /// The program and its arguments, run as given (an engine that goes through a shell
  /// quotes each one).
  std::vector<std::string> command;
  /// Variables set for the process. Secrets such as the worker token belong here, never in
  /// `command`: engines show a job's command line to whoever may list jobs.
  std::map<std::string, std::string> environment;
  /// What the engine reserves for the process (0: nothing of that kind). An engine that
  /// reserves GPUs hands them over in CUDA_VISIBLE_DEVICES.
  double gpus = 0;
  double cpus = 0;
  /// Shown with the job where the engine keeps such things (Ray: its metadata).
  std::map<std::string, std::string> labels;
};

enum class LaunchState {
  /// Submitted; waiting for resources or being started.
  pending,
  /// Its process runs.
  running,
  /// Finished, failed, or stopped: it will not run again.
  ended,
};

[[nodiscard]] inline const char* to_string(LaunchState state) noexcept {
  switch (state) {
    case LaunchState::pending:
      return "pending";
    case LaunchState::running:
      return "running";
    case LaunchState::ended:
      return "ended";
  }
  return "unknown";
}

struct LaunchStatus {
  LaunchState state = LaunchState::pending;
  /// The engine's own words (Ray's status and message; an exit code).
  std::string message;
};

/// An engine that runs worker processes as jobs.
///
/// Required expressions, for `E& engine`, `const E& view`, `const WorkerLaunch& launch` and
/// `const std::string& job`:
///   - `engine.submit(launch)` starts a job and returns the engine's id for it; throws
///     (with the engine's reason) where the engine refuses it or cannot be reached;
///   - `engine.status(job)` returns a `LaunchStatus`; throws where the engine cannot say
///     (unreachable: the job's state is unknown, not ended);
///   - `engine.stop(job)` asks the job to end (its process gets SIGTERM, then SIGKILL);
///     nothing for a job that has ended; throws where the engine cannot be reached;
///   - `view.describe()` returns a `std::string` naming the engine for people ("Ray at
///     http://127.0.0.1:8265").
/// `WorkerFleet` calls one engine from one thread at a time. `RayJobLauncher`
/// (`server/ray_job_launcher.hpp`) conforms.
///
/// A minimal conforming type (an engine that runs nothing):
/// @code{.cpp}
/// struct Nowhere {
///   std::string submit(const cuda_agent::WorkerLaunch&) { throw std::runtime_error("no engine here"); }
///   cuda_agent::LaunchStatus status(const std::string&) { return {cuda_agent::LaunchState::ended, "never ran"}; }
///   void stop(const std::string&) {}
///   std::string describe() const { return "nowhere"; }
/// };
/// static_assert(cuda_agent::WorkerLauncher<Nowhere>);
/// @endcode
template <class E>
concept WorkerLauncher = requires(E& engine, const E& view, const WorkerLaunch& launch, const std::string& job) {
  { engine.submit(launch) } -> std::same_as<std::string>;
  { engine.status(job) } -> std::same_as<LaunchStatus>;
  { engine.stop(job) } -> std::same_as<void>;
  { view.describe() } -> std::same_as<std::string>;
};

/// A `WorkerLauncher` that starts several workers as one submission (Slurm: a job array),
/// which keeps a cluster's queue short and schedules them together.
///
/// Required expression, besides `WorkerLauncher`'s, for `E& engine` and
/// `std::span<const WorkerLaunch> launches`:
///   - `engine.submit_all(launches)` starts a job for each launch and returns their ids in
///     the launches' order; throws where the engine refuses them, having started none.
template <class E>
concept BatchWorkerLauncher = WorkerLauncher<E> && requires(E& engine, std::span<const WorkerLaunch> launches) {
  { engine.submit_all(launches) } -> std::same_as<std::vector<std::string>>;
};

/// Any `WorkerLauncher`, owned, behind one type: what `cuda-agent serve` holds for the
/// engine its options name.
class AnyWorkerLauncher {
 public:
  template <class E>
  requires(WorkerLauncher<std::remove_cvref_t<E>> && !std::is_same_v<std::remove_cvref_t<E>, AnyWorkerLauncher>)
      AnyWorkerLauncher(E&& engine)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<E>>>(std::forward<E>(engine))) {}

  AnyWorkerLauncher(AnyWorkerLauncher&&) noexcept = default;
  AnyWorkerLauncher& operator=(AnyWorkerLauncher&&) noexcept = default;

  std::string submit(const WorkerLaunch& launch) { return self_->submit(launch); }
  /// The engine's own `submit_all` where it has one; otherwise one `submit` each, and the
  /// jobs already started are stopped again where a later one is refused.
  std::vector<std::string> submit_all(std::span<const WorkerLaunch> launches) { return self_->submit_all(launches); }
  LaunchStatus status(const std::string& job) { return self_->status(job); }
  void stop(const std::string& job) { self_->stop(job); }
  [[nodiscard]] std::string describe() const { return self_->describe(); }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual std::string submit(const WorkerLaunch& launch) = 0;
    virtual std::vector<std::string> submit_all(std::span<const WorkerLaunch> launches) = 0;
    virtual LaunchStatus status(const std::string& job) = 0;
    virtual void stop(const std::string& job) = 0;
    [[nodiscard]] virtual std::string describe() const = 0;
  };
  template <class E>
  struct Model final : Interface {
    explicit Model(E value) : engine(std::move(value)) {}
    std::string submit(const WorkerLaunch& launch) override { return engine.submit(launch); }
    std::vector<std::string> submit_all(std::span<const WorkerLaunch> launches) override {
      if constexpr (BatchWorkerLauncher<E>) {
        return engine.submit_all(launches);
      } else {
        std::vector<std::string> jobs;
        try {
          for (const WorkerLaunch& launch : launches) jobs.push_back(engine.submit(launch));
        } catch (...) {
          for (const std::string& job : jobs) {
            try {
              engine.stop(job);
            } catch (...) {  // NOLINT(bugprone-empty-catch): the refusal is what the caller is told
            }
          }
          throw;
        }
        return jobs;
      }
    }
    LaunchStatus status(const std::string& job) override { return engine.status(job); }
    void stop(const std::string& job) override { engine.stop(job); }
    [[nodiscard]] std::string describe() const override { return engine.describe(); }
    E engine;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(BatchWorkerLauncher<AnyWorkerLauncher>);

struct WorkerFleetOptions {
  /// Jobs kept alive.
  std::size_t workers = 1;
  /// The launch of worker `index` (0 to workers - 1) for its `attempt`th submission (0: the
  /// first); its name must differ for every (index, attempt).
  std::function<WorkerLaunch(std::size_t index, std::size_t attempt)> make_launch;
  /// How often the engine is asked how each job stands.
  std::chrono::milliseconds poll_interval{2'000};
  /// The pause before a worker's job is submitted again (after its job ended, or the engine
  /// refused it), doubling with each such failure in a row from the first to the last. A
  /// job that has run for `retry_last` clears the count.
  std::chrono::milliseconds retry_first{1'000};
  std::chrono::milliseconds retry_last{60'000};
  /// At most this many replacements (of ended jobs, and those `replace` asked for) within
  /// `restart_window`. The one beyond makes the fleet give up replacing (`status()` says
  /// why); what still runs is kept.
  std::size_t max_restarts = 10;
  std::chrono::milliseconds restart_window{600'000};
  /// How long `stop()` waits for the engine to report the stopped jobs ended.
  std::chrono::milliseconds stop_wait{20'000};
  /// Lines for people (a job ended, replaced, refused), from the fleet's thread.
  std::function<void(const std::string&)> on_notice;
};

/// Keeps `WorkerFleetOptions::workers` jobs of an engine alive: `start()` submits them,
/// a thread of its own replaces the ones that end, `stop()` (or the destructor) stops them
/// all.
class WorkerFleet {
 public:
  /// Throws std::invalid_argument without workers or `make_launch`.
  WorkerFleet(AnyWorkerLauncher engine, WorkerFleetOptions options)
      : engine_(std::move(engine)),
        options_(std::move(options)),
        description_(engine_.describe()),
        slots_(options_.workers) {
    if (options_.workers == 0) throw std::invalid_argument("a worker fleet needs at least one worker");
    if (!options_.make_launch) throw std::invalid_argument("a worker fleet needs make_launch");
    options_.retry_first = std::max(options_.retry_first, std::chrono::milliseconds(1));
    options_.retry_last = std::max(options_.retry_last, options_.retry_first);
  }

  WorkerFleet(const WorkerFleet&) = delete;
  WorkerFleet& operator=(const WorkerFleet&) = delete;

  ~WorkerFleet() {
    try {
      stop();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor reports nothing
    }
  }

  /// Submits every worker's first job, then keeps them. Throws std::runtime_error (with the
  /// engine's reason) where the engine refuses one; the jobs already submitted are stopped.
  void start() {
    // One submission for all of them where the engine has one (a Slurm job array).
    std::vector<WorkerLaunch> launches;
    for (std::size_t index = 0; index < slots_.size(); ++index) launches.push_back(options_.make_launch(index, 0));
    std::vector<std::string> jobs;
    try {
      jobs = engine_.submit_all(launches);
    } catch (const std::exception& error) {
      throw std::runtime_error("cannot start worker jobs on " + engine_.describe() + ": " + error.what());
    }
    if (jobs.size() != launches.size()) {
      for (const std::string& job : jobs) engine_.stop(job);
      throw std::runtime_error(engine_.describe() + " started " + std::to_string(jobs.size()) + " jobs for " +
                               std::to_string(launches.size()) + " workers");
    }
    {
      const std::lock_guard lock(mutex_);
      const Clock::time_point now = Clock::now();
      for (std::size_t index = 0; index < slots_.size(); ++index)
        record_submission(slots_[index], std::move(jobs[index]), launches[index].name, now);
    }
    thread_ = std::jthread([this](const std::stop_token& stop) { keep(stop); });
  }

  /// Stops keeping the workers, asks the engine to stop every job that has not ended, and
  /// waits up to `stop_wait` for it to report them ended. Safe to call again.
  void stop() {
    if (thread_.joinable()) {
      thread_.request_stop();
      wake_.notify_all();
      thread_.join();
    }
    stop_jobs();
  }

  /// Stops the job of the worker launched as `name` (`WorkerLaunch::name`, which the worker
  /// registers with) and submits its replacement, from the fleet's thread, within the cap on
  /// replacements; beyond it the job is kept. False where no job of the fleet that has not
  /// ended was launched as `name`.
  bool replace(const std::string& name, const std::string& why) {
    {
      const std::lock_guard lock(mutex_);
      const auto slot = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& each) {
        return each.name == name && each.state != LaunchState::ended;
      });
      if (slot == slots_.end()) return false;
      slot->replace_because = why;
    }
    wake_.notify_all();
    return true;
  }

  /// The engine, the jobs (each with its worker's name, its state and the engine's
  /// message), the replacements so far, and why the fleet gave up replacing where it did.
  [[nodiscard]] nlohmann::json status() const {
    const std::lock_guard lock(mutex_);
    nlohmann::json jobs = nlohmann::json::array();
    std::size_t running = 0;
    std::size_t pending = 0;
    for (const Slot& slot : slots_) {
      if (slot.state == LaunchState::running) ++running;
      if (slot.state == LaunchState::pending) ++pending;
      jobs.push_back({{"job", slot.job.empty() ? nlohmann::json(nullptr) : nlohmann::json(slot.job)},
                      {"name", slot.name},
                      {"state", to_string(slot.state)},
                      {"message", slot.message},
                      {"submissions", slot.submissions}});
    }
    return {{"engine", description_},
            {"workers", slots_.size()},
            {"running", running},
            {"pending", pending},
            {"replacements", replacements_},
            {"stopped", stopped_},
            {"gave_up", gave_up_.empty() ? nlohmann::json(nullptr) : nlohmann::json(gave_up_)},
            {"jobs", std::move(jobs)}};
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct Slot {
    /// The engine's id of the worker's last job (empty: none yet), the name it was launched
    /// as, and how it stands; an ended one waits for its replacement, unless `replace` is
    /// false.
    std::string job;
    std::string name;
    LaunchState state = LaunchState::ended;
    std::string message;
    std::size_t submissions = 0;
    /// Failures in a row (ended jobs, refused submissions): the back-off's exponent.
    std::size_t failures = 0;
    Clock::time_point next_submission{};
    Clock::time_point running_since{};
    bool replace = true;
    /// Why `replace` asked to replace the running job; empty: it did not.
    std::string replace_because;
  };

  [[nodiscard]] std::chrono::milliseconds back_off(std::size_t failures) const {
    std::chrono::milliseconds pause = options_.retry_first;
    for (std::size_t i = 1; i < failures && pause < options_.retry_last; ++i) pause *= 2;
    return std::min(pause, options_.retry_last);
  }

  void notice(const std::string& line) const {
    if (options_.on_notice) options_.on_notice(line);
  }

  /// Submits worker `index`'s next job (engine call outside the lock); throws what the
  /// engine threw.
  void submit(std::size_t index, Clock::time_point now) {
    std::size_t attempt = 0;
    {
      const std::lock_guard lock(mutex_);
      attempt = slots_[index].submissions;
    }
    const WorkerLaunch launch = options_.make_launch(index, attempt);
    std::string job = engine_.submit(launch);
    const std::lock_guard lock(mutex_);
    record_submission(slots_[index], std::move(job), launch.name, now);
  }

  /// Under the lock: `slot`'s worker has a new job, pending.
  static void record_submission(Slot& slot, std::string job, std::string name, Clock::time_point now) {
    slot.job = std::move(job);
    slot.name = std::move(name);
    slot.replace_because.clear();
    slot.state = LaunchState::pending;
    slot.message = "submitted";
    slot.running_since = now;
    ++slot.submissions;
  }

  void keep(const std::stop_token& stop) {
    std::mutex pause;
    while (!stop.stop_requested()) {
      for (std::size_t index = 0; index < slots_.size() && !stop.stop_requested(); ++index) tend(index);
      std::unique_lock lock(pause);
      wake_.wait_for(lock, stop, options_.poll_interval, [] { return false; });
    }
  }

  /// One look at worker `index`: submits where it is due, replaces a job `replace` asked
  /// for, asks how its job stands, and schedules a replacement when it has ended.
  void tend(std::size_t index) {
    const Clock::time_point now = Clock::now();
    std::string job;
    std::string replace_because;
    {
      const std::lock_guard lock(mutex_);
      Slot& slot = slots_[index];
      if (slot.state == LaunchState::ended && (!slot.replace || now < slot.next_submission)) return;
      if (slot.state != LaunchState::ended) {
        job = slot.job;
        replace_because = std::exchange(slot.replace_because, {});
      }
    }
    if (!replace_because.empty()) {
      replace_running(index, job, replace_because, now);
      return;
    }
    if (job.empty()) {
      try {
        submit(index, now);
      } catch (const std::exception& error) {
        const std::lock_guard lock(mutex_);
        Slot& slot = slots_[index];
        ++slot.failures;
        slot.next_submission = now + back_off(slot.failures);
        slot.message = std::string("the engine refused the job: ") + error.what();
        notice("worker " + std::to_string(index) + ": " + slot.message + "; trying again in " +
               std::to_string(back_off(slot.failures).count()) + " ms");
      }
      return;
    }
    LaunchStatus status;
    try {
      status = engine_.status(job);
    } catch (const std::exception& error) {
      const std::lock_guard lock(mutex_);
      slots_[index].message = std::string("cannot ask how the job stands: ") + error.what();
      return;
    }
    const std::lock_guard lock(mutex_);
    Slot& slot = slots_[index];
    if (status.state == LaunchState::running && slot.state != LaunchState::running) slot.running_since = now;
    if (status.state == LaunchState::running && now - slot.running_since >= options_.retry_last) slot.failures = 0;
    slot.state = status.state;
    slot.message = status.message;
    if (status.state != LaunchState::ended) return;
    // Ended without being told to: replace it, unless replacements come too fast.
    if (!may_replace(slot, now, "the last job ended: " + status.message)) return;
    notice("worker job " + job + " ended (" + status.message + "); a replacement in " +
           std::to_string(back_off(slot.failures).count()) + " ms");
  }

  /// Stops worker `index`'s `job`, which runs but which `replace` was asked to replace
  /// (`why`), and schedules its replacement; beyond the cap, keeps it.
  void replace_running(std::size_t index, const std::string& job, const std::string& why, Clock::time_point now) {
    {
      const std::lock_guard lock(mutex_);
      Slot& slot = slots_[index];
      if (!may_replace(slot, now, "the last was replaced: " + why)) return;
      slot.state = LaunchState::ended;
      slot.message = "stopped to be replaced: " + why;
      notice("worker job " + job + " is stopped to be replaced (" + why + "); a replacement in " +
             std::to_string(back_off(slot.failures).count()) + " ms");
    }
    try {
      engine_.stop(job);
    } catch (const std::exception& error) {
      notice("cannot stop worker job " + job + ": " + error.what());
    }
  }

  /// Under the lock: counts a replacement of `slot`'s job and schedules it after the
  /// back-off, or, beyond the cap on replacements within the window, gives up replacing
  /// (`last` says what became of the last job) and returns false.
  bool may_replace(Slot& slot, Clock::time_point now, const std::string& last) {
    while (!restarts_.empty() && now - restarts_.front() > options_.restart_window) restarts_.pop_front();
    if (!gave_up_.empty() || restarts_.size() >= options_.max_restarts) {
      if (gave_up_.empty()) {
        gave_up_ = std::to_string(restarts_.size()) + " replacements within " +
                   std::to_string(options_.restart_window.count() / 1000) + " s; " + last;
        notice("giving up replacing worker jobs: " + gave_up_);
      }
      slot.replace = false;
      return false;
    }
    restarts_.push_back(now);
    ++replacements_;
    ++slot.failures;
    slot.next_submission = now + back_off(slot.failures);
    return true;
  }

  /// Asks the engine to stop every job not known to have ended, then waits for it to say
  /// they have.
  void stop_jobs() {
    std::vector<std::string> jobs;
    {
      const std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
      for (Slot& slot : slots_) {
        slot.replace = false;
        if (slot.state != LaunchState::ended) jobs.push_back(slot.job);
      }
    }
    for (const std::string& job : jobs) {
      try {
        engine_.stop(job);
      } catch (const std::exception& error) {
        notice("cannot stop worker job " + job + ": " + error.what());
      }
    }
    const Clock::time_point deadline = Clock::now() + options_.stop_wait;
    while (!jobs.empty()) {
      std::vector<std::string> left;
      for (const std::string& job : jobs) {
        LaunchStatus status;
        try {
          status = engine_.status(job);
        } catch (const std::exception&) {
          left.push_back(job);
          continue;
        }
        const std::lock_guard lock(mutex_);
        for (Slot& slot : slots_)
          if (slot.job == job) {
            slot.state = status.state;
            slot.message = status.message;
          }
        if (status.state != LaunchState::ended) left.push_back(job);
      }
      jobs = std::move(left);
      if (jobs.empty()) break;
      if (Clock::now() >= deadline) {
        notice(std::to_string(jobs.size()) + " worker jobs not reported ended within " +
               std::to_string(options_.stop_wait.count()) + " ms of being stopped");
        break;
      }
      std::this_thread::sleep_for(std::min(options_.poll_interval, std::chrono::milliseconds(500)));
    }
  }

  AnyWorkerLauncher engine_;
  WorkerFleetOptions options_;
  std::string description_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  std::deque<Clock::time_point> restarts_;
  std::size_t replacements_ = 0;
  std::string gave_up_;
  bool stopped_ = false;
  std::condition_variable_any wake_;
  std::jthread thread_;
};

}  // namespace cuda_agent
