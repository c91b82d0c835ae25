// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Profiler` concept: time a verified candidate against the eager and
/// `torch.compile` references fairly, and return distributions and verdicts. Its
/// refinement `PolicyProfiler` takes a request's timing budget with each call.

#include <concepts>     // same_as
#include <memory>       // unique_ptr, make_unique
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// Measures speed.
///
/// Required expressions, for `P& profiler`, `const Task& task` and `const Candidate& candidate`
/// (built and verified):
///   - `profiler.profile(task, candidate)` returns a `ProfileResult`: per-contender
///     statistics taken in one regime, and for each baseline a speedup with its
///     confidence interval and a verdict. A verdict of FASTER is a claim that survives
///     noise: it needs the whole interval to clear the threshold. If the candidate's
///     timed outputs turn out wrong, `rejection` says so.
///
/// A minimal conforming type (which measures nothing):
/// @code{.cpp}
/// struct NoTiming {
///   cuda_agent::ProfileResult profile(const cuda_agent::Task&, const cuda_agent::Candidate&) { return {}; }
/// };
/// static_assert(cuda_agent::Profiler<NoTiming>);
/// @endcode
template <class P>
concept Profiler = requires(P& profiler, const Task& task, const Candidate& candidate) {
  { profiler.profile(task, candidate) } -> std::same_as<ProfileResult>;
};

/// A profiler that takes a request's `EvaluationPolicy` with each call: its timing budget
/// (seconds, rounds) replaces the profiler's own for that call alone.
///
/// Required expression, besides `Profiler`'s, for `const EvaluationPolicy& policy`:
///   - `profiler.profile(task, candidate, policy)` returns a `ProfileResult`, as
///     `profile(task, candidate)` does, within `policy`'s budget (an empty policy changes
///     nothing).
///
/// A minimal conforming type (which measures nothing, whatever its budget):
/// @code{.cpp}
/// struct NoTimingWithinBudget {
///   cuda_agent::ProfileResult profile(const cuda_agent::Task&, const cuda_agent::Candidate&,
///                                     const cuda_agent::EvaluationPolicy& = {}) {
///     return {};
///   }
/// };
/// static_assert(cuda_agent::PolicyProfiler<NoTimingWithinBudget>);
/// @endcode
template <class P>
concept PolicyProfiler = Profiler<P> &&
    requires(P& profiler, const Task& task, const Candidate& candidate, const EvaluationPolicy& policy) {
  { profiler.profile(task, candidate, policy) } -> std::same_as<ProfileResult>;
};

/// Holds any `Profiler` by value (move-only) behind one type. Models `PolicyProfiler`
/// whatever it holds: a profiler that takes no policy times within its own budget.
class AnyProfiler {
 public:
  template <class P>
  requires(Profiler<std::remove_cvref_t<P>> && !std::is_same_v<std::remove_cvref_t<P>, AnyProfiler>)
      AnyProfiler(P&& profiler)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<P>>>(std::forward<P>(profiler))) {}

  AnyProfiler(AnyProfiler&&) noexcept = default;
  AnyProfiler& operator=(AnyProfiler&&) noexcept = default;

  [[nodiscard]] ProfileResult profile(const Task& task, const Candidate& candidate) {
    return self_->profile(task, candidate, EvaluationPolicy{});
  }
  [[nodiscard]] ProfileResult profile(const Task& task, const Candidate& candidate, const EvaluationPolicy& policy) {
    return self_->profile(task, candidate, policy);
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual ProfileResult profile(const Task& task, const Candidate& candidate, const EvaluationPolicy& policy) = 0;
  };
  template <class P>
  struct Model final : Interface {
    explicit Model(P value) : profiler(std::move(value)) {}
    ProfileResult profile(const Task& task, const Candidate& candidate, const EvaluationPolicy& policy) override {
      if constexpr (PolicyProfiler<P>)
        return profiler.profile(task, candidate, policy);
      else
        return profiler.profile(task, candidate);
    }
    P profiler;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(PolicyProfiler<AnyProfiler>);

}  // namespace cuda_agent
