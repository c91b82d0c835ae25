// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What the evaluator's stages exchange: a candidate, the compile driver's result with
/// structured diagnostics, the verifier's verdict with a machine-readable reason, the
/// profiler's timing statistics and speedup verdicts, and the reward derived from them.

#include <algorithm>    // transform
#include <array>        // array
#include <cctype>       // tolower
#include <chrono>       // milliseconds
#include <cstddef>      // size_t
#include <filesystem>   // path
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // pair
#include <vector>       // vector

#include <nlohmann/json.hpp>

namespace cuda_agent {

/// A candidate solution: `model_new.py` and `kernels/` in `source_directory`.
struct Candidate {
  std::filesystem::path source_directory;
  /// Where the compile driver left the importable extension; empty before compiling.
  std::filesystem::path build_directory;
};

enum class DiagnosticSeverity { error, warning, note };

/// One compiler message, located.
struct Diagnostic {
  /// Relative to the candidate directory where possible.
  std::string file;
  int line = 0;
  int column = 0;
  DiagnosticSeverity severity = DiagnosticSeverity::error;
  std::string message;
};

struct CompileResult {
  bool succeeded = false;
  bool timed_out = false;
  std::vector<Diagnostic> diagnostics;
  /// The compilers' output, capped (head and tail kept).
  std::string log;
  std::chrono::milliseconds duration{0};
  /// The built extension module, when `succeeded`.
  std::filesystem::path module_path;
  /// Translation units compiled now, and those taken from the object cache.
  std::size_t objects_compiled = 0;
  std::size_t objects_reused = 0;
  /// Toolchain, per-file timings and cache use, precompiled header, link: for reports
  /// and for finding out where build time goes.
  nlohmann::json details = nlohmann::json::object();
};

/// Why a candidate was not accepted. Stable identifiers: they appear in JSON results,
/// trajectories and datasets.
enum class RejectionReason {
  compile_error,        ///< the candidate did not build
  load_error,           ///< the extension or model_new.py failed to import
  interface_mismatch,   ///< no ModelNew, or its constructor differs from Model's
  unresolved_sources,   ///< a single-file generation whose extension sources only running it would produce
  state_dict_mismatch,  ///< Model's weights do not load strictly into ModelNew
  forbidden_operation,  ///< torch compute ran inside ModelNew.forward
  forbidden_module,     ///< used a module the contract excludes (threads, processes, frame walking, ...)
  forbidden_construct,  ///< source constructs the contract excludes (try/except fallback, monkeypatching, reflection,
                        ///< ...)
  forbidden_symbol,     ///< the built extension links a symbol outside the contract's allowlist
  kernel_not_launched,  ///< the custom extension did no work during forward
  output_type,          ///< an output is not exactly torch.Tensor (or the structure's type differs)
  output_structure,     ///< a different number or nesting of outputs
  shape_mismatch,
  dtype_mismatch,
  device_mismatch,
  value_mismatch,            ///< values differ beyond the tolerance
  non_finite,                ///< NaN or Inf where the reference has none
  nondeterministic,          ///< two runs on the same inputs disagree
  input_mutated,             ///< inputs changed although the reference leaves them alone
  global_state_modified,     ///< process-wide torch settings changed (baseline sabotage)
  state_kept_between_calls,  ///< ModelNew's own Python state changed from call to call (a counter, a cache)
  work_outlived_call,        ///< threads, processes or unjoined streams still running after forward
  timed_output_mismatch,     ///< outputs produced while being timed were wrong
  time_below_trusted_bound,  ///< the reported time is below what the trusted side's own clock allows
  task_unfit,                ///< the task cannot tell real implementations from null ones; not scored
  timeout,                   ///< exceeded its time budget (hung kernel, endless loop)
  crashed,                   ///< the candidate's process died (signal, illegal address, abort)
  runtime_error,             ///< ModelNew's constructor or forward raised an exception
  harness_error,             ///< the evaluator itself failed; not the candidate's fault
};

namespace detail {
inline constexpr std::array<std::pair<RejectionReason, std::string_view>, 29> rejection_reason_names{{
    {RejectionReason::compile_error, "compile_error"},
    {RejectionReason::load_error, "load_error"},
    {RejectionReason::interface_mismatch, "interface_mismatch"},
    {RejectionReason::unresolved_sources, "unresolved_sources"},
    {RejectionReason::state_dict_mismatch, "state_dict_mismatch"},
    {RejectionReason::forbidden_operation, "forbidden_operation"},
    {RejectionReason::forbidden_module, "forbidden_module"},
    {RejectionReason::forbidden_construct, "forbidden_construct"},
    {RejectionReason::forbidden_symbol, "forbidden_symbol"},
    {RejectionReason::kernel_not_launched, "kernel_not_launched"},
    {RejectionReason::output_type, "output_type"},
    {RejectionReason::output_structure, "output_structure"},
    {RejectionReason::shape_mismatch, "shape_mismatch"},
    {RejectionReason::dtype_mismatch, "dtype_mismatch"},
    {RejectionReason::device_mismatch, "device_mismatch"},
    {RejectionReason::value_mismatch, "value_mismatch"},
    {RejectionReason::non_finite, "non_finite"},
    {RejectionReason::nondeterministic, "nondeterministic"},
    {RejectionReason::input_mutated, "input_mutated"},
    {RejectionReason::global_state_modified, "global_state_modified"},
    {RejectionReason::state_kept_between_calls, "state_kept_between_calls"},
    {RejectionReason::work_outlived_call, "work_outlived_call"},
    {RejectionReason::timed_output_mismatch, "timed_output_mismatch"},
    {RejectionReason::time_below_trusted_bound, "time_below_trusted_bound"},
    {RejectionReason::task_unfit, "task_unfit"},
    {RejectionReason::timeout, "timeout"},
    {RejectionReason::crashed, "crashed"},
    {RejectionReason::runtime_error, "runtime_error"},
    {RejectionReason::harness_error, "harness_error"},
}};
}  // namespace detail

[[nodiscard]] constexpr std::string_view to_string(RejectionReason reason) noexcept {
  for (const auto& [value, name] : detail::rejection_reason_names)
    if (value == reason) return name;
  return "harness_error";
}

[[nodiscard]] constexpr std::optional<RejectionReason> parse_rejection_reason(std::string_view text) noexcept {
  for (const auto& [value, name] : detail::rejection_reason_names)
    if (name == text) return value;
  return std::nullopt;
}

/// A reason code for programs and a message a model can act on.
struct Rejection {
  RejectionReason reason = RejectionReason::harness_error;
  /// For example "output 0 differs at index (3, 17): expected 0.5012, got 0.0000".
  std::string message;
  nlohmann::json details = nlohmann::json::object();
};

/// Whether `rejection` says the device's memory ran out in the candidate's process (torch's
/// "CUDA out of memory", an allocation that failed): whose failure that is depends on who
/// held the memory.
[[nodiscard]] inline bool is_out_of_device_memory(const Rejection& rejection) {
  if (rejection.reason != RejectionReason::runtime_error && rejection.reason != RejectionReason::crashed) return false;
  std::string message = rejection.message;
  std::transform(message.begin(), message.end(), message.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return message.find("out of memory") != std::string::npos || message.find("outofmemoryerror") != std::string::npos;
}

struct VerificationResult {
  bool correct = false;
  /// Set exactly when `correct` is false.
  std::optional<Rejection> rejection;
  int checks_passed = 0;
  int checks_total = 0;
  std::chrono::milliseconds duration{0};
  /// Per-check error statistics, tolerances used, and so on.
  nlohmann::json details = nlohmann::json::object();
};

/// How a speedup compares with the threshold.
enum class Verdict {
  faster,     ///< the whole confidence interval is faster than the threshold demands
  slower,     ///< the whole interval is slower by more than the threshold
  same,       ///< the whole interval lies within the threshold either side
  ambiguous,  ///< the interval straddles a boundary: more samples might decide it
};

[[nodiscard]] constexpr std::string_view to_string(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::faster:
      return "FASTER";
    case Verdict::slower:
      return "SLOWER";
    case Verdict::same:
      return "SAME";
    case Verdict::ambiguous:
      return "AMBIGUOUS";
  }
  return "AMBIGUOUS";
}

[[nodiscard]] constexpr std::optional<Verdict> parse_verdict(std::string_view text) noexcept {
  for (Verdict verdict : {Verdict::faster, Verdict::slower, Verdict::same, Verdict::ambiguous})
    if (to_string(verdict) == text) return verdict;
  return std::nullopt;
}

/// How samples were taken; the same regime applies to every contender of a comparison.
enum class TimingRegime {
  per_call,    ///< one call per CUDA-event pair, L2 flushed before each
  cuda_graph,  ///< calls captured in a CUDA graph and replayed (short kernels)
  batched,     ///< several calls per event pair on distinct inputs (short, uncapturable)
};

[[nodiscard]] constexpr std::string_view to_string(TimingRegime regime) noexcept {
  switch (regime) {
    case TimingRegime::per_call:
      return "per_call";
    case TimingRegime::cuda_graph:
      return "cuda_graph";
    case TimingRegime::batched:
      return "batched";
  }
  return "per_call";
}

[[nodiscard]] constexpr std::optional<TimingRegime> parse_timing_regime(std::string_view text) noexcept {
  for (TimingRegime regime : {TimingRegime::per_call, TimingRegime::cuda_graph, TimingRegime::batched})
    if (to_string(regime) == text) return regime;
  return std::nullopt;
}

/// Summary of one contender's samples, in microseconds per call.
struct TimingStats {
  /// "candidate", "eager" or "compile".
  std::string contender;
  std::size_t samples = 0;
  /// Samples dropped because the SM clock was throttled.
  std::size_t discarded = 0;
  double median_us = 0;
  double mean_us = 0;
  double min_us = 0;
  double max_us = 0;
  double q1_us = 0;
  double q3_us = 0;
};

/// A candidate against one baseline.
struct SpeedupEstimate {
  /// "eager" or "compile".
  std::string baseline;
  /// Baseline median over candidate median: above 1 the candidate is faster.
  double speedup = 0;
  /// Confidence interval of `speedup`.
  double interval_low = 0;
  double interval_high = 0;
  double confidence = 0.95;
  /// FASTER needs the candidate's time at most (1 - threshold) times the baseline's
  /// over the whole interval.
  double threshold = 0.05;
  Verdict verdict = Verdict::ambiguous;
};

struct ProfileResult {
  TimingRegime regime = TimingRegime::per_call;
  std::vector<TimingStats> timings;
  std::optional<SpeedupEstimate> versus_eager;
  std::optional<SpeedupEstimate> versus_compile;
  /// Set when timing found the candidate wrong (outputs re-checked) or broken.
  std::optional<Rejection> rejection;
  /// Whether the verdicts may earn speed rewards. False where the samples come from host
  /// timers on a CPU: a shared machine's load moves them by more than any threshold, so
  /// there a correct candidate earns 1 at most, whatever its verdicts say.
  bool rewardable = true;
  /// Device name, clocks, throttling, sample budget, ...
  nlohmann::json details = nlohmann::json::object();

  [[nodiscard]] const TimingStats* timing(std::string_view contender) const noexcept {
    for (const TimingStats& each : timings)
      if (each.contender == contender) return &each;
    return nullptr;
  }
};

/// Everything known about one trusted evaluation of a candidate.
struct Evaluation {
  CompileResult compile;
  std::optional<VerificationResult> verification;
  std::optional<ProfileResult> profile;

  /// Built, verified correct, and not caught being wrong while timed.
  [[nodiscard]] bool correct() const noexcept {
    return compile.succeeded && verification && verification->correct && !(profile && profile->rejection);
  }
  /// False when the task itself cannot be scored (RejectionReason::task_unfit: it cannot
  /// tell a real implementation from a null one): such an evaluation says nothing about the
  /// candidate, and a trainer skips it instead of scoring it.
  [[nodiscard]] bool scored() const noexcept {
    return !(verification && verification->rejection && verification->rejection->reason == RejectionReason::task_unfit);
  }
  /// The first rejection on the way, if any. The verifier's static checks may reject a
  /// candidate before it is compiled, so its verdict comes first.
  [[nodiscard]] std::optional<Rejection> rejection() const {
    if (verification && verification->rejection) return verification->rejection;
    if (!compile.succeeded) return Rejection{RejectionReason::compile_error, "the candidate did not compile", {}};
    if (profile && profile->rejection) return profile->rejection;
    return std::nullopt;
  }
};

/// A scalar reward with a readable account of how it was reached.
struct Reward {
  double value = 0;
  /// A short tag such as "faster_than_compile". `unscored_label` marks an evaluation of a
  /// task unfit to be scored (`Evaluation::scored()` is false): its value (0) is no reward,
  /// and a trainer skips the sample.
  std::string label;
  std::string explanation;

  static constexpr std::string_view unscored_label = "unscored";
  [[nodiscard]] bool scored() const noexcept { return label != unscored_label; }
};

// ---------------------------------------------------------------------------------------
// JSON forms, used in results, reports and trajectories.

namespace detail {
inline nlohmann::json optional_json(const auto& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}
inline double milliseconds_of(std::chrono::milliseconds duration) { return static_cast<double>(duration.count()); }
}  // namespace detail

inline void to_json(nlohmann::json& out, const Diagnostic& diagnostic) {
  static constexpr std::array<std::string_view, 3> severities{"error", "warning", "note"};
  out = {{"file", diagnostic.file},
         {"line", diagnostic.line},
         {"column", diagnostic.column},
         {"severity", severities[static_cast<std::size_t>(diagnostic.severity)]},
         {"message", diagnostic.message}};
}

inline void from_json(const nlohmann::json& in, Diagnostic& diagnostic) {
  diagnostic.file = in.value("file", "");
  diagnostic.line = in.value("line", 0);
  diagnostic.column = in.value("column", 0);
  const std::string severity = in.value("severity", "error");
  diagnostic.severity = severity == "warning" ? DiagnosticSeverity::warning
                        : severity == "note"  ? DiagnosticSeverity::note
                                              : DiagnosticSeverity::error;
  diagnostic.message = in.value("message", "");
}

inline void to_json(nlohmann::json& out, const CompileResult& result) {
  out = {{"succeeded", result.succeeded},
         {"timed_out", result.timed_out},
         {"diagnostics", result.diagnostics},
         {"log", result.log},
         {"duration_ms", detail::milliseconds_of(result.duration)},
         {"module_path", result.module_path.string()},
         {"objects_compiled", result.objects_compiled},
         {"objects_reused", result.objects_reused},
         {"details", result.details}};
}

inline void from_json(const nlohmann::json& in, CompileResult& result) {
  result.succeeded = in.value("succeeded", false);
  result.timed_out = in.value("timed_out", false);
  result.diagnostics = in.value("diagnostics", std::vector<Diagnostic>{});
  result.log = in.value("log", "");
  result.duration = std::chrono::milliseconds(static_cast<long long>(in.value("duration_ms", 0.0)));
  result.module_path = in.value("module_path", "");
  result.objects_compiled = in.value("objects_compiled", std::size_t{0});
  result.objects_reused = in.value("objects_reused", std::size_t{0});
}

inline void to_json(nlohmann::json& out, const Rejection& rejection) {
  out = {{"reason", to_string(rejection.reason)}, {"message", rejection.message}, {"details", rejection.details}};
}

inline void from_json(const nlohmann::json& in, Rejection& rejection) {
  const std::string reason = in.value("reason", "harness_error");
  rejection.reason = parse_rejection_reason(reason).value_or(RejectionReason::harness_error);
  rejection.message = in.value("message", "");
  if (!parse_rejection_reason(reason)) rejection.message = "unknown reason '" + reason + "': " + rejection.message;
  rejection.details = in.value("details", nlohmann::json::object());
}

inline void to_json(nlohmann::json& out, const VerificationResult& result) {
  out = {{"correct", result.correct},
         {"rejection", detail::optional_json(result.rejection)},
         {"checks_passed", result.checks_passed},
         {"checks_total", result.checks_total},
         {"duration_ms", detail::milliseconds_of(result.duration)},
         {"details", result.details}};
}

inline void from_json(const nlohmann::json& in, VerificationResult& result) {
  result.correct = in.value("correct", false);
  result.rejection.reset();
  if (const auto rejection = in.find("rejection"); rejection != in.end() && !rejection->is_null())
    result.rejection = rejection->get<Rejection>();
  if (!result.correct && !result.rejection)
    result.rejection = Rejection{RejectionReason::harness_error, "incorrect without a stated reason", {}};
  result.checks_passed = in.value("checks_passed", 0);
  result.checks_total = in.value("checks_total", 0);
  result.duration = std::chrono::milliseconds(static_cast<long long>(in.value("duration_ms", 0.0)));
  result.details = in.value("details", nlohmann::json::object());
}

inline void to_json(nlohmann::json& out, const TimingStats& stats) {
  out = {{"contender", stats.contender}, {"samples", stats.samples}, {"discarded", stats.discarded},
         {"median_us", stats.median_us}, {"mean_us", stats.mean_us}, {"min_us", stats.min_us},
         {"max_us", stats.max_us},       {"q1_us", stats.q1_us},     {"q3_us", stats.q3_us}};
}

inline void from_json(const nlohmann::json& in, TimingStats& stats) {
  stats.contender = in.value("contender", "");
  stats.samples = in.value("samples", std::size_t{0});
  stats.discarded = in.value("discarded", std::size_t{0});
  stats.median_us = in.value("median_us", 0.0);
  stats.mean_us = in.value("mean_us", 0.0);
  stats.min_us = in.value("min_us", 0.0);
  stats.max_us = in.value("max_us", 0.0);
  stats.q1_us = in.value("q1_us", 0.0);
  stats.q3_us = in.value("q3_us", 0.0);
}

inline void to_json(nlohmann::json& out, const SpeedupEstimate& estimate) {
  out = {{"baseline", estimate.baseline},
         {"speedup", estimate.speedup},
         {"interval", {estimate.interval_low, estimate.interval_high}},
         {"confidence", estimate.confidence},
         {"threshold", estimate.threshold},
         {"verdict", to_string(estimate.verdict)}};
}

inline void from_json(const nlohmann::json& in, SpeedupEstimate& estimate) {
  estimate.baseline = in.value("baseline", "");
  estimate.speedup = in.value("speedup", 0.0);
  if (const auto interval = in.find("interval");
      interval != in.end() && interval->is_array() && interval->size() == 2) {
    estimate.interval_low = interval->at(0).get<double>();
    estimate.interval_high = interval->at(1).get<double>();
  }
  estimate.confidence = in.value("confidence", 0.95);
  estimate.threshold = in.value("threshold", 0.05);
  estimate.verdict = parse_verdict(in.value("verdict", "")).value_or(Verdict::ambiguous);
}

inline void to_json(nlohmann::json& out, const ProfileResult& result) {
  out = {{"regime", to_string(result.regime)},
         {"timings", result.timings},
         {"versus_eager", detail::optional_json(result.versus_eager)},
         {"versus_compile", detail::optional_json(result.versus_compile)},
         {"rejection", detail::optional_json(result.rejection)},
         {"rewardable", result.rewardable},
         {"details", result.details}};
}

namespace detail {
template <class T>
void optional_from_json(const nlohmann::json& in, const char* key, std::optional<T>& value) {
  value.reset();
  if (const auto found = in.find(key); found != in.end() && !found->is_null()) value = found->get<T>();
}
}  // namespace detail

inline void from_json(const nlohmann::json& in, ProfileResult& result) {
  result.regime = parse_timing_regime(in.value("regime", "")).value_or(TimingRegime::per_call);
  result.timings = in.value("timings", std::vector<TimingStats>{});
  detail::optional_from_json(in, "versus_eager", result.versus_eager);
  detail::optional_from_json(in, "versus_compile", result.versus_compile);
  detail::optional_from_json(in, "rejection", result.rejection);
  result.rewardable = in.value("rewardable", true);
  result.details = in.value("details", nlohmann::json::object());
}

inline void to_json(nlohmann::json& out, const Evaluation& evaluation) {
  out = {{"correct", evaluation.correct()},
         {"scored", evaluation.scored()},
         {"compile", evaluation.compile},
         {"verification", detail::optional_json(evaluation.verification)},
         {"profile", detail::optional_json(evaluation.profile)}};
}

inline void from_json(const nlohmann::json& in, Evaluation& evaluation) {
  evaluation.compile = in.value("compile", CompileResult{});
  detail::optional_from_json(in, "verification", evaluation.verification);
  detail::optional_from_json(in, "profile", evaluation.profile);
}

inline void to_json(nlohmann::json& out, const Reward& reward) {
  out = {{"value", reward.value},
         {"label", reward.label},
         {"explanation", reward.explanation},
         {"scored", reward.scored()}};
}

inline void from_json(const nlohmann::json& in, Reward& reward) {
  reward.value = in.value("value", 0.0);
  reward.label = in.value("label", "");
  reward.explanation = in.value("explanation", "");
}

}  // namespace cuda_agent
