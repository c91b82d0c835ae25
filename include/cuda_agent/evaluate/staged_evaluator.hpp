// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `StagedEvaluator` concept: an `Evaluator` whose evaluation splits where the
/// hardware it needs changes. `prepare` (copying the candidate's sources, the static
/// checks, the build) needs only CPUs; `verify` runs the candidate on its device; `profile`
/// times it there and must have that device to itself. A pool of evaluations
/// (service/evaluation_pool.hpp) runs the three stages on different workers, so that a
/// build never holds a GPU and timing never shares one. Its refinement
/// `PolicyStagedEvaluator` takes a request's `EvaluationPolicy` with each candidate.

#include <concepts>      // same_as
#include <filesystem>    // path, remove_all
#include <memory>        // shared_ptr, unique_ptr, make_unique
#include <system_error>  // error_code
#include <type_traits>   // remove_cvref_t, is_same_v
#include <utility>       // forward, move

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/evaluator.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

namespace detail {

/// Removes a directory when the last owner lets go of it, unless asked to keep it.
class DirectoryCleanup {
 public:
  DirectoryCleanup(std::filesystem::path root, bool keep) : root_(std::move(root)), keep_(keep) {}
  DirectoryCleanup(const DirectoryCleanup&) = delete;
  DirectoryCleanup& operator=(const DirectoryCleanup&) = delete;
  ~DirectoryCleanup() {
    std::error_code ignored;
    if (!keep_) std::filesystem::remove_all(root_, ignored);
  }

 private:
  std::filesystem::path root_;
  bool keep_;
};

}  // namespace detail

/// A candidate between the stages of its evaluation: its task, the pristine copy of its
/// sources and its build (`candidate`), and the evaluation so far. The directories are
/// removed when the last copy of it goes (unless the evaluator keeps them).
struct PreparedCandidate {
  Task task;
  Candidate candidate;
  Evaluation evaluation;
  std::shared_ptr<detail::DirectoryCleanup> directories;
  /// The request's policy, as `prepare` was given it: what `verify` and `profile` apply.
  EvaluationPolicy policy;

  /// Built, and no verdict yet: the candidate goes on to verification.
  [[nodiscard]] bool ready() const noexcept { return evaluation.compile.succeeded && !evaluation.verification; }
};

/// An `Evaluator` in stages.
///
/// Required expressions, besides `Evaluator`'s, for `E& evaluator`, `const Task& task`,
/// `const std::filesystem::path& candidate_directory` and `PreparedCandidate& prepared`:
///   - `evaluator.prepare(task, candidate_directory)` returns a `PreparedCandidate`: the
///     stages that need no device. A candidate refused on the way (its files unreadable,
///     the static checks, the build) carries its verdict and is not `ready()`.
///   - `evaluator.verify(prepared)` verifies a ready candidate and records the result in
///     `prepared.evaluation.verification`; it does nothing for one that is not ready.
///   - `evaluator.profile(prepared)` times a candidate verified correct and records the
///     result in `prepared.evaluation.profile`; it does nothing otherwise (or when the
///     evaluator does not time).
/// `evaluate(task, candidate_directory)` gives what the three stages give in turn. None of
/// them throws for what a candidate does. A pool calls `prepare` of one evaluator from
/// several threads at once, and `verify` and `profile` of a candidate prepared by another
/// evaluator of the same configuration.
///
/// A minimal conforming type (which refuses every candidate before building it):
/// @code{.cpp}
/// struct RefusesAll {
///   cuda_agent::PreparedCandidate prepare(const cuda_agent::Task& task, const std::filesystem::path&) {
///     cuda_agent::PreparedCandidate prepared{task, {}, {}, nullptr, {}};
///     prepared.evaluation.compile.log = "no compiler configured";
///     return prepared;
///   }
///   void verify(cuda_agent::PreparedCandidate&) {}
///   void profile(cuda_agent::PreparedCandidate&) {}
///   cuda_agent::Evaluation evaluate(const cuda_agent::Task& task, const std::filesystem::path& directory) {
///     return prepare(task, directory).evaluation;
///   }
/// };
/// static_assert(cuda_agent::StagedEvaluator<RefusesAll>);
/// @endcode
template <class E>
concept StagedEvaluator = Evaluator<E> &&
    requires(E& evaluator, const Task& task, const std::filesystem::path& candidate_directory,
             PreparedCandidate& prepared) {
  { evaluator.prepare(task, candidate_directory) } -> std::same_as<PreparedCandidate>;
  evaluator.verify(prepared);
  evaluator.profile(prepared);
};

/// A `StagedEvaluator` that takes a request's `EvaluationPolicy` with each candidate.
///
/// Required expression, besides `StagedEvaluator`'s, for `const EvaluationPolicy& policy`:
///   - `evaluator.prepare(task, candidate_directory, policy)` prepares the candidate as
///     `prepare(task, candidate_directory)` does, under `policy` (its library policy), and
///     keeps `policy` in the `PreparedCandidate`, where `verify` and `profile` find it.
///
/// A minimal conforming type (which refuses every candidate, whatever its policy):
/// @code{.cpp}
/// struct RefusesAllAlike {
///   cuda_agent::PreparedCandidate prepare(const cuda_agent::Task& task, const std::filesystem::path&,
///                                         const cuda_agent::EvaluationPolicy& policy = {}) {
///     cuda_agent::PreparedCandidate prepared{task, {}, {}, nullptr, policy};
///     prepared.evaluation.compile.log = "no compiler configured";
///     return prepared;
///   }
///   void verify(cuda_agent::PreparedCandidate&) {}
///   void profile(cuda_agent::PreparedCandidate&) {}
///   cuda_agent::Evaluation evaluate(const cuda_agent::Task& task, const std::filesystem::path& directory) {
///     return prepare(task, directory).evaluation;
///   }
/// };
/// static_assert(cuda_agent::PolicyStagedEvaluator<RefusesAllAlike>);
/// @endcode
template <class E>
concept PolicyStagedEvaluator = StagedEvaluator<E> &&
    requires(E& evaluator, const Task& task, const std::filesystem::path& candidate_directory,
             const EvaluationPolicy& policy) {
  { evaluator.prepare(task, candidate_directory, policy) } -> std::same_as<PreparedCandidate>;
};

/// Holds any `StagedEvaluator` by value (move-only) behind one type. Models
/// `PolicyStagedEvaluator` whatever it holds: an evaluator that takes no policy evaluates
/// with its own settings.
class AnyStagedEvaluator {
 public:
  template <class E>
  requires(StagedEvaluator<std::remove_cvref_t<E>> && !std::is_same_v<std::remove_cvref_t<E>, AnyStagedEvaluator>)
      AnyStagedEvaluator(E&& evaluator)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<E>>>(std::forward<E>(evaluator))) {}

  AnyStagedEvaluator(AnyStagedEvaluator&&) noexcept = default;
  AnyStagedEvaluator& operator=(AnyStagedEvaluator&&) noexcept = default;

  [[nodiscard]] PreparedCandidate prepare(const Task& task, const std::filesystem::path& candidate_directory) {
    return self_->prepare(task, candidate_directory, EvaluationPolicy{});
  }
  [[nodiscard]] PreparedCandidate prepare(const Task& task, const std::filesystem::path& candidate_directory,
                                          const EvaluationPolicy& policy) {
    return self_->prepare(task, candidate_directory, policy);
  }
  void verify(PreparedCandidate& prepared) { self_->verify(prepared); }
  void profile(PreparedCandidate& prepared) { self_->profile(prepared); }
  [[nodiscard]] Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) {
    return self_->evaluate(task, candidate_directory);
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual PreparedCandidate prepare(const Task& task, const std::filesystem::path& candidate_directory,
                                      const EvaluationPolicy& policy) = 0;
    virtual void verify(PreparedCandidate& prepared) = 0;
    virtual void profile(PreparedCandidate& prepared) = 0;
    virtual Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) = 0;
  };
  template <class E>
  struct Model final : Interface {
    explicit Model(E value) : evaluator(std::move(value)) {}
    PreparedCandidate prepare(const Task& task, const std::filesystem::path& candidate_directory,
                              const EvaluationPolicy& policy) override {
      if constexpr (PolicyStagedEvaluator<E>)
        return evaluator.prepare(task, candidate_directory, policy);
      else
        return evaluator.prepare(task, candidate_directory);
    }
    void verify(PreparedCandidate& prepared) override { evaluator.verify(prepared); }
    void profile(PreparedCandidate& prepared) override { evaluator.profile(prepared); }
    Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) override {
      return evaluator.evaluate(task, candidate_directory);
    }
    E evaluator;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(PolicyStagedEvaluator<AnyStagedEvaluator>);

}  // namespace cuda_agent
