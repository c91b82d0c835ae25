// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `TrustedEvaluator`: the evaluation a reward is computed from. It takes the candidate's
/// source files (model_new.py and the sources under kernels/, nothing else, no symbolic
/// link followed) out of the agent's directory into a pristine directory the agent never
/// touched, runs the verifier's static checks, builds the sources with the compile
/// driver, verifies the built candidate, and profiles it when a profiler is configured.
/// Whatever the candidate does ends in an `Evaluation`, never in an exception. A request's
/// `EvaluationPolicy` (`prepare`'s third argument) replaces the verifier's tolerance and
/// library policy where the verifier is a `PolicyVerifier`, and the profiler's budget where
/// the profiler is a `PolicyProfiler`; others evaluate with their own.

#include <atomic>        // atomic
#include <chrono>        // steady_clock
#include <exception>     // exception
#include <filesystem>    // path, create_directories, remove_all
#include <functional>    // function
#include <map>           // map
#include <memory>        // shared_ptr
#include <optional>      // optional
#include <stdexcept>     // invalid_argument
#include <string>        // string, to_string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <utility>       // move

#include <unistd.h>  // getpid

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/compile/compile_driver.hpp"
#include "cuda_agent/evaluate/staged_evaluator.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/evaluator.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/profiler.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/verifier.hpp"
#include "cuda_agent/verify/harness_verifier.hpp"

namespace cuda_agent {

struct TrustedEvaluatorOptions {
  /// Where pristine copies and builds go; the sandbox users must be able to read it.
  /// Empty: a directory under the system's temporary directory.
  std::filesystem::path work_directory;
  /// Keep each evaluation's directory (for inspection) instead of removing it.
  bool keep_directories = false;
  std::function<void(std::string_view)> progress;
};

/// Satisfies `Evaluator`. `S` is the compile driver's sandbox type. The stages follow what
/// `V` models: a `PrescreeningVerifier`'s static checks run before anything is built, and
/// a `LibraryPolicyVerifier`'s policy decides what the build may link.
template <Verifier V = HarnessVerifier, Sandbox S = AnySandbox>
class TrustedEvaluator {
 public:
  TrustedEvaluator(std::shared_ptr<CompileDriver<S>> compiler, V verifier,
                   std::optional<AnyProfiler> profiler = std::nullopt, TrustedEvaluatorOptions options = {})
      : compiler_(std::move(compiler)),
        verifier_(std::move(verifier)),
        profiler_(std::move(profiler)),
        options_(std::move(options)) {
    if (!compiler_) throw std::invalid_argument("TrustedEvaluator needs a compile driver");
    if (options_.work_directory.empty())
      options_.work_directory = std::filesystem::temp_directory_path() /
                                ("cuda-agent-evaluations-" + std::to_string(::getpid()) + "-" + detail::random_hex(4));
    options_.work_directory = std::filesystem::absolute(options_.work_directory).lexically_normal();
  }

  [[nodiscard]] V& verifier() noexcept { return verifier_; }
  [[nodiscard]] CompileDriver<S>& compiler() noexcept { return *compiler_; }
  [[nodiscard]] const TrustedEvaluatorOptions& options() const noexcept { return options_; }

  /// The whole evaluation: `prepare`, then `verify` and `profile`.
  [[nodiscard]] Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) {
    PreparedCandidate prepared = prepare(task, candidate_directory);
    verify(prepared);
    profile(prepared);
    return std::move(prepared.evaluation);
  }

  /// The stages that need no GPU: the candidate's sources copied into a pristine directory,
  /// the static checks, the build. A candidate refused on the way carries its verdict
  /// (`PreparedCandidate::ready()` is false). May be called from several threads at once.
  [[nodiscard]] PreparedCandidate prepare(const Task& task, const std::filesystem::path& candidate_directory) {
    return prepare(task, candidate_directory, EvaluationPolicy{});
  }

  /// `prepare` under a request's `policy`, which the prepared candidate keeps for `verify`
  /// and `profile`.
  [[nodiscard]] PreparedCandidate prepare(const Task& task, const std::filesystem::path& candidate_directory,
                                          const EvaluationPolicy& policy) {
    PreparedCandidate prepared;
    prepared.task = task;
    prepared.policy = policy;
    Evaluation& evaluation = prepared.evaluation;
    const std::filesystem::path root =
        options_.work_directory / (std::to_string(++*count_) + "-" + detail::random_hex(4));
    const std::filesystem::path source = root / "source";
    const std::filesystem::path build = root / "build";
    prepared.candidate = Candidate{source, build};
    prepared.directories = std::make_shared<detail::DirectoryCleanup>(root, options_.keep_directories);

    // 1. Only the candidate's own source files, copied by the host.
    report("copying the candidate's sources");
    CandidateSources sources;
    try {
      sources = read_candidate_sources(candidate_directory);
      detail::make_open_directory(options_.work_directory);
      detail::make_open_directory(root);
      detail::make_open_directory(source);
      write_candidate_sources(sources.files, source);
    } catch (const std::exception& error) {
      evaluation.compile.log = std::string("the candidate's files could not be copied: ") + error.what();
      evaluation.verification = rejection(RejectionReason::load_error, evaluation.compile.log);
      return prepared;
    }
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& [path, why] : sources.skipped) skipped.push_back({{"path", path}, {"reason", why}});
    evaluation.compile.details["skipped_files"] = skipped;

    // 2. Static checks first: a candidate they reject is not worth building.
    if constexpr (PrescreeningVerifier<V>) {
      report("static checks");
      try {
        if (auto rejected = prescreen(task, sources.files, policy)) {
          evaluation.compile.log = "not built: the static checks rejected the candidate";
          VerificationResult result;
          result.rejection = std::move(rejected);
          evaluation.verification = std::move(result);
          return prepared;
        }
      } catch (const std::exception& error) {
        evaluation.verification =
            rejection(RejectionReason::harness_error, std::string("the static checks could not run: ") + error.what());
        return prepared;
      }
    }

    // 3. Build, with the task's library policy where the verifier has one.
    report("compiling");
    try {
      if constexpr (LibraryPolicyVerifier<V>) {
        const LibraryPolicy libraries = library_policy(task, policy).intersection(compiler_->options().libraries);
        evaluation.compile = compiler_->build(source, build, libraries);
        evaluation.compile.details["library_policy"] = libraries;
      } else {
        evaluation.compile = compiler_->build(source, build);
      }
    } catch (const std::exception& error) {
      evaluation.compile.succeeded = false;
      evaluation.compile.log = std::string("the compile driver failed (not the candidate's fault): ") + error.what();
      evaluation.verification = rejection(RejectionReason::harness_error, evaluation.compile.log);
      return prepared;
    }
    evaluation.compile.details["skipped_files"] = skipped;
    // A module the driver refused for what it links is a verdict on the candidate, like
    // the verifier's own link check.
    if (const auto refused = evaluation.compile.details.find("library_policy_violations");
        !evaluation.compile.succeeded && refused != evaluation.compile.details.end() && refused->is_array() &&
        !refused->empty()) {
      std::string message = "the extension " + refused->front().get<std::string>();
      if (refused->size() > 1) message += " (and " + std::to_string(refused->size() - 1) + " more)";
      VerificationResult result;
      result.rejection = Rejection{
          RejectionReason::forbidden_symbol, std::move(message), {{"stage", "link"}, {"violations", *refused}}};
      evaluation.verification = std::move(result);
    }
    return prepared;
  }

  /// Verifies a candidate `prepare` built (nothing for one it refused). `prepared` may
  /// come from another TrustedEvaluator that shares the work directory.
  void verify(PreparedCandidate& prepared) {
    if (!prepared.ready()) return;
    report("verifying");
    try {
      if constexpr (PolicyVerifier<V>)
        prepared.evaluation.verification = verifier_.verify(prepared.task, prepared.candidate, prepared.policy);
      else
        prepared.evaluation.verification = verifier_.verify(prepared.task, prepared.candidate);
    } catch (const std::exception& error) {
      prepared.evaluation.verification =
          rejection(RejectionReason::harness_error,
                    std::string("the verifier failed (not the candidate's fault): ") + error.what());
    }
  }

  /// Times a verified candidate when a profiler is configured (nothing otherwise).
  void profile(PreparedCandidate& prepared) {
    Evaluation& evaluation = prepared.evaluation;
    if (!profiler_ || !evaluation.compile.succeeded || !evaluation.verification || !evaluation.verification->correct ||
        evaluation.profile)
      return;
    report("profiling");
    try {
      evaluation.profile = profiler_->profile(prepared.task, prepared.candidate, prepared.policy);
    } catch (const std::exception& error) {
      ProfileResult failed;
      failed.rejection = Rejection{RejectionReason::harness_error,
                                   std::string("the profiler failed (not the candidate's fault): ") + error.what(),
                                   {}};
      evaluation.profile = std::move(failed);
    }
  }

 private:
  static VerificationResult rejection(RejectionReason reason, std::string message) {
    VerificationResult result;
    result.rejection = Rejection{reason, std::move(message), {}};
    return result;
  }

  void report(std::string_view line) const {
    if (options_.progress) options_.progress(line);
  }

  std::optional<Rejection> prescreen(const Task& task, const std::map<std::string, std::string>& files,
                                     const EvaluationPolicy& policy) requires PrescreeningVerifier<V> {
    if constexpr (PolicyVerifier<V>)
      return verifier_.prescreen(task, files, policy);
    else
      return verifier_.prescreen(task, files);
  }

  LibraryPolicy library_policy(const Task& task, const EvaluationPolicy& policy) requires LibraryPolicyVerifier<V> {
    if constexpr (PolicyVerifier<V>)
      return verifier_.library_policy(task, policy);
    else
      return verifier_.library_policy(task);
  }

  std::shared_ptr<CompileDriver<S>> compiler_;
  V verifier_;
  std::optional<AnyProfiler> profiler_;
  TrustedEvaluatorOptions options_;
  /// Evaluations begun, shared by the copies of a moved evaluator and safe across threads.
  std::shared_ptr<std::atomic<std::size_t>> count_ = std::make_shared<std::atomic<std::size_t>>(0);
};

static_assert(PolicyStagedEvaluator<TrustedEvaluator<>>);

}  // namespace cuda_agent
