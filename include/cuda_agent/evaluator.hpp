// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Evaluator` concept: the trusted evaluation of a candidate. It copies the
/// candidate's source files (and nothing else) into a pristine directory the agent never
/// touched, builds, verifies and profiles them there, and returns what it found.

#include <concepts>     // same_as
#include <filesystem>   // path
#include <memory>       // unique_ptr, make_unique
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// Scores candidates in a way the candidate cannot influence.
///
/// Required expressions, for `E& evaluator`, `const Task& task` and
/// `const std::filesystem::path& candidate_directory` (a directory holding `model_new.py`
/// and `kernels/`, typically an agent's workspace):
///   - `evaluator.evaluate(task, candidate_directory)` returns an `Evaluation`. Only the
///     candidate's source files are taken from the directory; the harness, the reference
///     and everything else come from trusted copies. A candidate that fails to build,
///     is wrong, crashes or hangs yields an Evaluation saying so, never an exception.
///
/// A minimal conforming type (which never builds anything):
/// @code{.cpp}
/// struct NeverBuilds {
///   cuda_agent::Evaluation evaluate(const cuda_agent::Task&, const std::filesystem::path&) {
///     cuda_agent::Evaluation evaluation;
///     evaluation.compile.log = "no compiler configured";
///     return evaluation;
///   }
/// };
/// static_assert(cuda_agent::Evaluator<NeverBuilds>);
/// @endcode
template <class E>
concept Evaluator = requires(E& evaluator, const Task& task, const std::filesystem::path& candidate_directory) {
  { evaluator.evaluate(task, candidate_directory) } -> std::same_as<Evaluation>;
};

/// Holds any `Evaluator` by value (move-only) behind one type.
class AnyEvaluator {
 public:
  template <class E>
  requires(Evaluator<std::remove_cvref_t<E>> && !std::is_same_v<std::remove_cvref_t<E>, AnyEvaluator>)
      AnyEvaluator(E&& evaluator)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<E>>>(std::forward<E>(evaluator))) {}

  AnyEvaluator(AnyEvaluator&&) noexcept = default;
  AnyEvaluator& operator=(AnyEvaluator&&) noexcept = default;

  [[nodiscard]] Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) {
    return self_->evaluate(task, candidate_directory);
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) = 0;
  };
  template <class E>
  struct Model final : Interface {
    explicit Model(E value) : evaluator(std::move(value)) {}
    Evaluation evaluate(const Task& task, const std::filesystem::path& candidate_directory) override {
      return evaluator.evaluate(task, candidate_directory);
    }
    E evaluator;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(Evaluator<AnyEvaluator>);

}  // namespace cuda_agent
