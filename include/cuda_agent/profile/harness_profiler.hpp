// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `HarnessProfiler`: the shipped `Profiler`. It times a built, verified candidate against
/// eager PyTorch and torch.compile through the Python harness (cuda_agent_harness.
/// timing.session) and turns the session's samples into statistics and verdicts
/// (timing_statistics.hpp).
///
/// A session has two processes: the reference side, trusted, which never imports the
/// candidate and runs the comparison; and the candidate side, confined, which holds
/// ModelNew and answers the reference side over two FIFOs in a session directory.
/// A `TimingLauncher` starts them: fresh interpreters (`ProcessTimingLauncher`, the
/// candidate through the host's `Sandbox`) or warm harness workers. They take turns on the GPU in interleaved rounds
/// (see timing/session.py for the protocol and what each side checks). The sandbox must make the Python environment,
/// the harness directory, the candidate's source and build directories and the session directory (read-write) visible
/// to the candidate, and expose the GPU.

#include <chrono>       // seconds, milliseconds
#include <cmath>        // isfinite, lround
#include <concepts>     // same_as
#include <cstdint>      // uint64_t
#include <cstdlib>      // getenv
#include <filesystem>   // path
#include <fstream>      // ifstream, ofstream
#include <functional>   // function
#include <memory>       // shared_ptr, make_shared
#include <optional>     // optional
#include <random>       // random_device
#include <stdexcept>    // invalid_argument, runtime_error
#include <string>       // string
#include <string_view>  // string_view
#include <thread>       // jthread
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/harness_session.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/profile/detail/temporary_directory.hpp"
#include "cuda_agent/profile/timing_statistics.hpp"
#include "cuda_agent/profiler.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// How long and how hard one session works.
struct TimingBudget {
  /// Seconds of interleaved rounds (a cache miss adds as much again for the baselines alone).
  double seconds = 5.0;
  /// Rounds are taken until the speedups are known to `target_relative_error` (half-width
  /// of a 95% interval) with at least `min_rounds`, or the seconds are spent with at least
  /// `floor_rounds`, or `max_rounds` are reached.
  int min_rounds = 10;
  int floor_rounds = 5;
  int max_rounds = 400;
  double target_relative_error = 0.01;
  double warmup_seconds = 0.05;
  int calibration_samples = 5;
};

/// The trusted clock of a timing session (the harness's timing/trusted_clock.py): batches of the
/// candidate's calls timed by the reference side's own clock, on inputs it placed in memory
/// it owns and lends to the candidate's process, with outputs it reads back itself. A
/// candidate whose reported time per call is below that bound by more than `margin` is
/// rejected (`time_below_trusted_bound`); for the A/A kinds ("reference", "compile") the
/// bound is only reported.
struct TrustedClockOptions {
  bool enabled = true;
  /// How far below the bound a reported time may be, as a fraction of the bound. Unset: the
  /// harness's default for the device: 10% on CUDA, plus a batch's fixed cost (1 ms)
  /// relative to the batch; 90% on the CPU, where a shared host's time slices stretch a
  /// batch of milliseconds much more than a sample of microseconds.
  std::optional<double> margin;
  /// Trusted batches per comparison at least; rounds drawn with `check_probability` add more.
  int min_batches = 3;
};

struct HarnessProfilerOptions {
  /// Interpreter with torch, for both sides (the sandbox must be able to run it).
  std::filesystem::path python;
  /// The directory that holds `cuda_agent_harness/`. Empty: the embedded copy is written
  /// to a private temporary directory for the profiler's lifetime.
  std::filesystem::path harness_directory;
  /// "cuda" or "cpu" (the same control flow with host timers, for CI).
  std::string device = "cuda";
  int device_index = 0;
  /// Where session directories are created; the candidate's sandbox must reach it. Empty:
  /// the candidate's build directory, or its source directory when it has none.
  std::filesystem::path session_parent;
  /// Baseline timings are cached here between evaluations (trusted; never shown to the
  /// candidate). Empty: no cache, torch.compile is built and timed in every session.
  std::filesystem::path baseline_cache_directory;
  bool time_compile = true;
  std::string compile_mode = "default";
  std::string compile_backend = "inductor";
  TimingBudget budget;
  /// Any contender under this many microseconds per call switches all to graph/batch timing.
  double short_kernel_us = 50;
  /// A sample is throttled when the SM clock is below (1 - tolerance) x the session's best.
  double throttle_tolerance = 0.25;
  /// A cached baseline is stale when live eager time differs from it by more than this: the
  /// same kernel timed in two sessions differs by 3 to 8%, and eager anchors the cached
  /// compile time to the live session, so a tighter bound re-times torch.compile for noise.
  double stale_tolerance = 0.10;
  /// ... or when the SM clock differs by more than this (a clock change moves compute-bound
  /// and memory-bound kernels unequally, which the anchor cannot carry over).
  double stale_clock_tolerance = 0.05;
  /// Share of rounds followed by a trusted batch, whose outputs the reference side reads back
  /// and checks (`trusted_clock.min_batches` per comparison at least).
  double check_probability = 0.2;
  TrustedClockOptions trusted_clock;
  double atol = 1e-2;
  double rtol = 1e-2;
  /// aten operators allowed inside ModelNew.forward beyond the contract's creation, copy
  /// and metadata operations (the forward guard applies while the candidate is timed).
  std::vector<std::string> extra_allowed_operations;
  /// What the candidate side times: "model_new" (the candidate), or for A/A measurements
  /// "reference" (the reference model) or "compile" (its torch.compile form).
  std::string candidate_kind = "model_new";
  SpeedupOptions statistics;
  std::chrono::seconds timeout{900};
  /// Fixes the session's seeds (inputs, order, checks); default: fresh random ones.
  std::optional<std::uint64_t> seed;
  /// Variables for both sides in addition to PATH, HOME, LANG and PYTHONPATH.
  Environment environment;
};

namespace detail {

/// Times of one contender in the rounds that have it (and, if given, `partner`).
inline std::vector<double> contender_times(const std::vector<const nlohmann::json*>& rounds, std::string_view name,
                                           std::string_view partner = {}) {
  std::vector<double> times;
  for (const nlohmann::json* round : rounds) {
    const nlohmann::json& samples = (*round)["samples"];
    if (!samples.contains(name) || (!partner.empty() && !samples.contains(partner))) continue;
    times.push_back(samples[std::string(name)]["time_us"].get<double>());
  }
  return times;
}

inline std::vector<double> cached_times(const nlohmann::json& cached, const char* name) {
  std::vector<double> times;
  for (const nlohmann::json& round : cached.at("rounds")) times.push_back(round.at(name).get<double>());
  return times;
}

/// Whether the trusted clock could not bound the candidate's time (its calls ran one after
/// another, and the reported time fell short of the bound): its speed is then unproven.
inline bool trusted_clock_unbounded(const nlohmann::json& details) {
  const auto clock = details.find("trusted_clock");
  return clock != details.end() && clock->is_object() && clock->value("unbounded", false);
}

/// Why the trusted clock left the speed unproven, in words a reward explanation ends with.
inline std::string why_unbounded(const nlohmann::json& details) {
  const nlohmann::json& clock = details["trusted_clock"];
  if (clock.value("too_short_to_prove", false)) {
    const double proof = clock.value("proof_margin", 0.0);
    return "the trusted clock's batches were too short against their fixed cost to bound the reported time within " +
           std::to_string(std::lround(proof * 100)) +
           "% (the task's inputs and outputs leave room for few calls per batch), so the speed is unproven";
  }
  if (clock.value("mode", std::string()) == "loop")
    return "its calls could not be captured in a CUDA graph and the reported time fell short of the trusted clock's "
           "bound, so the speed is unproven";
  return "outputs copied into the trusted batches explain a shortfall against the trusted clock's bound, so the speed "
         "is unproven";
}

inline Rejection rejection_from(const nlohmann::json& session) {
  if (const auto found = session.find("rejection"); found != session.end() && found->is_object())
    return found->get<Rejection>();
  std::string message = "the timing session failed";
  if (session.contains("error")) message += ": " + session["error"].get<std::string>();
  nlohmann::json details = nlohmann::json::object();
  if (session.contains("traceback")) details["traceback"] = session["traceback"];
  return {RejectionReason::harness_error, message, details};
}

}  // namespace detail

/// Statistics and verdicts from a timing session's JSON result (what
/// `timing/session.py reference` prints). Rounds flagged as throttled are left out while at
/// least `floor_rounds` unthrottled ones remain. The speedup against torch.compile is
/// paired per round when compile was timed live, and otherwise goes through the cached
/// compile/eager ratio times the live eager/candidate ratio, its interval widened by how
/// far live eager drifted from cached eager (`widen_for_anchor_drift`).
[[nodiscard]] inline ProfileResult profile_result_from_session(const nlohmann::json& session,
                                                               const SpeedupOptions& statistics = {},
                                                               int floor_rounds = 5) {
  ProfileResult result;
  nlohmann::json& details = result.details;
  for (const char* field :
       {"device", "regime_reason", "calls_per_sample", "calibration_us", "stop_reason", "compile_source",
        "baseline_cache", "reference_clock_mhz", "implausible_clock_readings", "compile_seconds", "elapsed_s",
        "warnings", "timing_constants", "dispatch_cover", "time_budget", "trusted_clock"})
    if (session.contains(field)) details[field] = session[field];
  result.regime = session.value("regime", "per_call") == "cuda_graph" ? TimingRegime::cuda_graph
                  : session.value("regime", "per_call") == "batched"  ? TimingRegime::batched
                                                                      : TimingRegime::per_call;
  if (!session.value("ok", false)) {
    result.rejection = detail::rejection_from(session);
    return result;
  }

  std::vector<const nlohmann::json*> all_rounds, unthrottled;
  std::size_t checked = 0;
  static const nlohmann::json no_rounds = nlohmann::json::array();
  const auto found_rounds = session.find("rounds");
  const nlohmann::json& session_rounds =
      found_rounds != session.end() && found_rounds->is_array() ? *found_rounds : no_rounds;
  for (const nlohmann::json& round : session_rounds) {
    all_rounds.push_back(&round);
    if (!round.value("throttled", false)) unthrottled.push_back(&round);
    if (round.value("checked", false)) ++checked;
  }
  const bool discard = static_cast<int>(unthrottled.size()) >= floor_rounds;
  const std::vector<const nlohmann::json*>& rounds = discard ? unthrottled : all_rounds;
  details["rounds"] = all_rounds.size();
  details["throttled_rounds"] = all_rounds.size() - unthrottled.size();
  details["rechecked_rounds"] = checked;
  if (!discard && unthrottled.size() != all_rounds.size())
    details["warnings"].push_back("the clock was throttled in most rounds; they are all kept");
  const std::size_t discarded = discard ? all_rounds.size() - unthrottled.size() : 0;

  nlohmann::json escapes = nlohmann::json::object();
  for (const char* name : {"candidate", "eager", "compile"}) {
    const std::vector<double> times = detail::contender_times(rounds, name);
    if (times.empty()) continue;
    result.timings.push_back(summarize_timings(name, times, discarded));
    std::size_t escaped = 0;
    for (const nlohmann::json* round : rounds)
      if ((*round)["samples"].contains(name) && (*round)["samples"][name].value("escape_us", 0.0) > 0) ++escaped;
    escapes[name] = escaped;
  }
  details["samples_with_escaped_work"] = escapes;

  const auto estimate = [&](const std::string& baseline,
                            const std::vector<RatioOfMedians>& chain) -> std::optional<SpeedupEstimate> {
    for (const RatioOfMedians& factor : chain)
      if (factor.numerator.size() < 2 || factor.denominator.size() < 2) return std::nullopt;
    return estimate_speedup(baseline, chain, statistics);
  };

  const std::vector<double> eager = detail::contender_times(rounds, "eager", "candidate");
  const std::vector<double> candidate_with_eager = detail::contender_times(rounds, "candidate", "eager");
  result.versus_eager = estimate("eager", {RatioOfMedians{eager, candidate_with_eager, SamplePairing::paired}});

  const std::vector<double> compile = detail::contender_times(rounds, "compile", "candidate");
  if (compile.size() >= 2) {
    const std::vector<double> candidate_with_compile = detail::contender_times(rounds, "candidate", "compile");
    result.versus_compile =
        estimate("compile", {RatioOfMedians{compile, candidate_with_compile, SamplePairing::paired}});
  } else if (const auto cached = session.find("cached_baselines"); cached != session.end() && cached->is_object()) {
    const std::vector<double> cached_eager = detail::cached_times(*cached, "eager");
    const std::vector<double> cached_compile = detail::cached_times(*cached, "compile");
    result.versus_compile = estimate("compile", {RatioOfMedians{cached_compile, cached_eager, SamplePairing::paired},
                                                 RatioOfMedians{eager, candidate_with_eager, SamplePairing::paired}});
    TimingStats stats = summarize_timings("compile", cached_compile);
    result.timings.push_back(stats);
    const double cached_eager_median = median(cached_eager);
    details["compile_timing"] = {{"source", "cache"},
                                 {"measured_at", cached->value("measured_at", "")},
                                 {"cached_eager_median_us", cached_eager_median}};
    if (result.versus_compile) {  // an estimate implies samples on both sides of each factor
      const double drift = median(eager) / cached_eager_median;
      details["compile_timing"]["eager_drift"] = drift;
      details["compile_timing"]["interval_before_drift"] = {result.versus_compile->interval_low,
                                                            result.versus_compile->interval_high};
      result.versus_compile = widen_for_anchor_drift(*result.versus_compile, drift);
    }
  }
  return result;
}

/// What the two sides of one timing session left behind.
struct TimingSessionOutcome {
  /// The reference side's result (what `timing/session.py reference` prints); null when
  /// it produced none.
  nlohmann::json reference_result;
  /// How the reference side failed, when it produced no result.
  std::string reference_failure;
  /// How the candidate side ended, for diagnostics (exit, sandbox, output tail).
  nlohmann::json candidate_side = nlohmann::json::object();
  /// Milliseconds spent, before the session, waiting for earlier processes to exit.
  double settled_ms = 0.0;
};

/// Starts the two sides of a timing session and waits for both.
///
/// Required expression, for `L& launcher`, `const Task& task`, `const Candidate& candidate`,
/// `nlohmann::json reference_request`, `nlohmann::json candidate_request` and
/// `std::chrono::seconds timeout`:
///   - `launcher.launch(task, candidate, reference_request, candidate_request, timeout)`
///     returns a `TimingSessionOutcome`. The requests come from the profiler without
///     places; the launcher decides where things live and adds them: `reference_path` to
///     both (a copy of the task's reference each side can read and neither can change),
///     `session` to both (a directory holding the FIFOs `to_reference` and
///     `to_candidate`), `output_directory` to the reference request (where the candidate
///     side can write and the reference side read), `candidate_directory` and
///     `build_directory` to the candidate request, and `candidate_gone_marker` to the
///     reference request (a file it creates once the candidate side has ended, so that a
///     reference side still waiting gives up at once). If the reference request asks for a
///     baseline cache, the launcher may move it to a directory the reference side can
///     write. The reference side runs trusted (it never imports the candidate), the
///     candidate side confined.
///
/// `ProcessTimingLauncher` starts fresh interpreters; `WorkerTimingLauncher`
/// (worker_timing_launcher.hpp) uses the verifier's warm harness workers, whose children
/// start in a fraction of the time an interpreter needs to import torch.
template <class L>
concept TimingLauncher = requires(L& launcher, const Task& task, const Candidate& candidate,
                                  nlohmann::json reference_request, nlohmann::json candidate_request,
                                  std::chrono::seconds timeout) {
  {
    launcher.launch(task, candidate, std::move(reference_request), std::move(candidate_request), timeout)
    } -> std::same_as<TimingSessionOutcome>;
};

namespace detail {

inline void write_readable_file(const std::filesystem::path& path, std::string_view content) {
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!stream) throw std::runtime_error("cannot write " + path.string());
  stream.close();
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                         std::filesystem::perms::group_read | std::filesystem::perms::others_read);
}

/// The two FIFOs of a timing session, open to both sides' users.
}  // namespace detail

/// Launches each side as a fresh Python process: the reference side directly (trusted,
/// unconfined), the candidate side through the host's `Sandbox`. The session directory
/// goes into `session_parent` (default: the candidate's build directory), which the
/// sandbox must let the candidate write; the reference side's files go into a private
/// temporary directory.
class ProcessTimingLauncher {
 public:
  ProcessTimingLauncher(std::filesystem::path python, std::filesystem::path harness_directory, AnySandbox sandbox,
                        Environment environment = {}, std::filesystem::path session_parent = {})
      : python_(std::move(python)),
        harness_directory_(std::move(harness_directory)),
        sandbox_(std::move(sandbox)),
        environment_(std::move(environment)),
        session_parent_(std::move(session_parent)) {}

  [[nodiscard]] TimingSessionOutcome launch(const Task& task, const Candidate& candidate,
                                            nlohmann::json reference_request, nlohmann::json candidate_request,
                                            std::chrono::seconds timeout) {
    // The reference side's files live where the candidate cannot reach them.
    detail::TemporaryDirectory trusted("cuda-agent-timing-trusted-");
    std::filesystem::path parent = session_parent_;
    if (parent.empty())
      parent = candidate.build_directory.empty() ? candidate.source_directory : candidate.build_directory;
    detail::TemporaryDirectory session(".timing-", parent);
    // The candidate side may run as another user: it opens the FIFOs and writes the
    // timed outputs it hands over here.
    std::filesystem::permissions(session.path(), std::filesystem::perms::all);
    detail::make_session_fifos(session.path());

    const std::filesystem::path reference_path = trusted.path() / "reference.py";
    const std::filesystem::path candidate_reference = session.path() / "reference.py";
    detail::write_readable_file(reference_path, task.reference_source);
    detail::write_readable_file(candidate_reference, task.reference_source);
    const std::filesystem::path result_path = trusted.path() / "result.json";
    const std::filesystem::path gone = trusted.path() / "candidate-gone";
    reference_request["reference_path"] = reference_path.string();
    reference_request["session"] = session.path().string();
    reference_request["output_directory"] = session.path().string();
    reference_request["result_path"] = result_path.string();
    reference_request["candidate_gone_marker"] = gone.string();
    candidate_request["reference_path"] = candidate_reference.string();
    candidate_request["session"] = session.path().string();
    candidate_request["candidate_directory"] = candidate.source_directory.string();
    candidate_request["build_directory"] = candidate.build_directory.string();
    const std::filesystem::path reference_file = trusted.path() / "reference-request.json";
    const std::filesystem::path candidate_file = session.path() / "candidate-request.json";
    detail::write_readable_file(reference_file, reference_request.dump());
    detail::write_readable_file(candidate_file, candidate_request.dump());

    Command candidate_command;
    candidate_command.argv = {python_.string(), "-m",        "cuda_agent_harness.timing.session",
                              "candidate",      "--request", candidate_file.string()};
    candidate_command.environment = side_environment();
    candidate_command.working_directory = session.path();
    candidate_command.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    candidate_command.output_limit = 16 * 1024;
    TimingSessionOutcome outcome;
    std::optional<CommandResult> candidate_result;
    std::string sandbox_failure;
    std::optional<ProcessResult> reference_result;
    {
      std::jthread candidate_side([&] {
        try {
          candidate_result = sandbox_.run(candidate_command);
        } catch (const std::exception& error) {
          sandbox_failure = error.what();
        }
        std::ofstream{gone};
      });
      ProcessSpec reference;
      reference.argv = {python_.string(), "-m",        "cuda_agent_harness.timing.session",
                        "reference",      "--request", reference_file.string()};
      Environment environment = side_environment();
      for (const char* name : {"HOME", "USER", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"})
        if (const char* value = std::getenv(name); value && !environment.get(name)) environment.set(name, value);
      reference.environment = std::move(environment);
      reference.working_directory = trusted.path();
      reference.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
      reference.merge_stderr = true;
      reference.output_limit = 64 * 1024;
      reference_result = run_process(reference);
    }  // joins the candidate side
    std::ifstream stream(result_path);
    if (stream) outcome.reference_result = nlohmann::json::parse(stream, nullptr, false);
    if (!outcome.reference_result.is_object()) {
      outcome.reference_result = nullptr;
      outcome.reference_failure = "the reference side produced no result (" + describe_exit(*reference_result) +
                                  "): " + reference_result->standard_output.text;
    }
    if (candidate_result)
      outcome.candidate_side = {{"exit", describe_exit(*candidate_result)},
                                {"confined", candidate_result->confined},
                                {"sandbox", candidate_result->sandbox},
                                {"output", candidate_result->standard_output.text}};
    else
      outcome.candidate_side = {{"sandbox_error", sandbox_failure}};
    return outcome;
  }

 private:
  Environment side_environment() const {
    Environment environment = Environment::from_current({"PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES"});
    for (const auto& [name, value] : environment_.variables()) environment.set(name, value);
    environment.set("PYTHONPATH", harness_directory_.string());
    environment.set("PYTHONDONTWRITEBYTECODE", "1");
    return environment;
  }

  std::filesystem::path python_;
  std::filesystem::path harness_directory_;
  AnySandbox sandbox_;
  Environment environment_;
  std::filesystem::path session_parent_;
};

static_assert(TimingLauncher<ProcessTimingLauncher>);

/// Times candidates against eager and torch.compile through the Python harness.
class HarnessProfiler {
 public:
  /// Launches through `launcher` (any `TimingLauncher`).
  template <TimingLauncher L>
  HarnessProfiler(HarnessProfilerOptions options, L launcher)
      : options_(std::move(options)),
        launch_([shared = std::make_shared<L>(std::move(launcher))](
                    const Task& task, const Candidate& candidate, nlohmann::json reference,
                    nlohmann::json candidate_side, std::chrono::seconds timeout) {
          return shared->launch(task, candidate, std::move(reference), std::move(candidate_side), timeout);
        }) {}

  /// Launches fresh interpreters: the reference side directly, the candidate side through
  /// `candidate_sandbox`. The harness is written out from the embedded copy when
  /// `options.harness_directory` is empty.
  HarnessProfiler(HarnessProfilerOptions options, AnySandbox candidate_sandbox) : options_(std::move(options)) {
    if (options_.python.empty())
      throw std::invalid_argument("HarnessProfiler: no Python interpreter configured (options.python)");
    if (options_.harness_directory.empty()) {
      harness_copy_ = std::make_shared<detail::TemporaryDirectory>("cuda-agent-harness-");
      write_embedded_resources("harness/", harness_copy_->path());
      options_.harness_directory = harness_copy_->path();
    }
    auto launcher = std::make_shared<ProcessTimingLauncher>(options_.python, options_.harness_directory,
                                                            std::move(candidate_sandbox), options_.environment,
                                                            options_.session_parent);
    launch_ = [launcher](const Task& task, const Candidate& candidate, nlohmann::json reference,
                         nlohmann::json candidate_side, std::chrono::seconds timeout) {
      return launcher->launch(task, candidate, std::move(reference), std::move(candidate_side), timeout);
    };
  }

  [[nodiscard]] const HarnessProfilerOptions& options() const noexcept { return options_; }

  /// The profiler's budget with a request's choices (seconds, rounds) in place of its own.
  [[nodiscard]] TimingBudget budget_for(const EvaluationPolicy& policy) const {
    TimingBudget budget = options_.budget;
    if (policy.timing_seconds) budget.seconds = *policy.timing_seconds;
    if (policy.timing_max_rounds) budget.max_rounds = *policy.timing_max_rounds;
    return budget;
  }

  /// What the reference side is told, before the launcher adds where things live; under a
  /// request's `policy`, within its budget.
  [[nodiscard]] nlohmann::json reference_request(const Task& task, std::uint64_t seed,
                                                 const EvaluationPolicy& policy = {}) const {
    const HarnessProfilerOptions& o = options_;
    const TimingBudget budget = budget_for(policy);
    nlohmann::json request = {
        {"device", o.device},
        {"device_index", o.device_index},
        {"task_hash", task.content_hash()},
        {"seed", seed},
        {"compile", {{"enabled", o.time_compile}, {"mode", o.compile_mode}, {"backend", o.compile_backend}}},
        {"budget",
         {{"time_s", budget.seconds},
          {"min_rounds", budget.min_rounds},
          {"floor_rounds", budget.floor_rounds},
          {"max_rounds", budget.max_rounds},
          {"target_relative_error", budget.target_relative_error},
          {"warmup_s", budget.warmup_seconds},
          {"calibration_samples", budget.calibration_samples}}},
        {"check", {{"probability", o.check_probability}, {"atol", o.atol}, {"rtol", o.rtol}}},
        {"trusted_clock", trusted_clock_request()},
        {"short_kernel_us", o.short_kernel_us},
        {"throttle_tolerance", o.throttle_tolerance},
        {"stale_tolerance", o.stale_tolerance},
        {"stale_clock_tolerance", o.stale_clock_tolerance},
        {"deadline_s", static_cast<double>(o.timeout.count())},
    };
    if (!o.baseline_cache_directory.empty())
      request["baseline_cache"] = {{"directory", o.baseline_cache_directory.string()}};
    return request;
  }

  /// The trusted clock's part of the reference side's request.
  [[nodiscard]] nlohmann::json trusted_clock_request() const {
    const TrustedClockOptions& clock = options_.trusted_clock;
    nlohmann::json request = {{"enabled", clock.enabled},
                              {"enforce", options_.candidate_kind == "model_new"},
                              {"min_batches", clock.min_batches}};
    if (clock.margin) request["margin"] = *clock.margin;
    return request;
  }

  /// What the candidate side is told, before the launcher adds where things live.
  [[nodiscard]] nlohmann::json candidate_request() const {
    return {{"device", options_.device},
            {"device_index", options_.device_index},
            {"candidate_kind", options_.candidate_kind},
            {"compile", {{"mode", options_.compile_mode}, {"backend", options_.compile_backend}}},
            {"policy", {{"extra_allowed_operations", options_.extra_allowed_operations}}},
            {"connect_timeout_s", static_cast<double>(options_.timeout.count())}};
  }

  /// Times `candidate`; under a request's `policy`, within its budget (which the result's
  /// details record as "budget").
  [[nodiscard]] ProfileResult profile(const Task& task, const Candidate& candidate,
                                      const EvaluationPolicy& policy = {}) {
    const std::uint64_t seed = options_.seed ? *options_.seed : fresh_seed();
    const TimingBudget budget = budget_for(policy);
    const TimingSessionOutcome outcome =
        launch_(task, candidate, reference_request(task, seed, policy), candidate_request(), options_.timeout);
    ProfileResult result;
    if (outcome.reference_result.is_object())
      result = profile_result_from_session(outcome.reference_result, options_.statistics, budget.floor_rounds);
    else
      result.rejection =
          Rejection{RejectionReason::harness_error, "the timing session failed: " + outcome.reference_failure, {}};
    // Host timers on a shared CPU move by more than any threshold, and a time the trusted
    // clock could not bound is unproven: their verdicts are shown, never rewarded.
    result.rewardable = options_.device == "cuda" && !detail::trusted_clock_unbounded(result.details);
    // On the CPU the reward policies' own reason (host timers) stands.
    if (options_.device == "cuda" && !result.rewardable)
      result.details["unrewardable"] = detail::why_unbounded(result.details);
    result.details["candidate_side"] = outcome.candidate_side;
    result.details["settled_ms"] = outcome.settled_ms;
    result.details["seed"] = seed;
    result.details["budget"] = {{"seconds", budget.seconds}, {"max_rounds", budget.max_rounds}};
    return result;
  }

 private:
  static std::uint64_t fresh_seed() {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32 | device()) & ((std::uint64_t{1} << 62) - 1);
  }

  HarnessProfilerOptions options_;
  std::shared_ptr<detail::TemporaryDirectory> harness_copy_;
  std::function<TimingSessionOutcome(const Task&, const Candidate&, nlohmann::json, nlohmann::json,
                                     std::chrono::seconds)>
      launch_;
};

static_assert(PolicyProfiler<HarnessProfiler>);

}  // namespace cuda_agent
