// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `RewardPolicy` concept: map one trusted evaluation to a scalar reward.

#include <concepts>     // same_as
#include <memory>       // unique_ptr, make_unique
#include <string_view>  // string_view
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move

#include "cuda_agent/evaluation.hpp"

namespace cuda_agent {

/// Turns an evaluation into a reward.
///
/// Required expressions, for `const R& policy` and `const Evaluation& evaluation`:
///   - `policy.reward(evaluation)` returns a `Reward` whose `value` the loop maximizes and
///     whose `label` and `explanation` say how it was reached. It must be a pure function
///     of the evaluation: the same evaluation always earns the same reward.
///     A policy that rewards speed reads it only from a profile that is `rewardable`
///     (`ProfileResult::rewardable`: false for host timers on a CPU).
///   - `policy.name()` is convertible to `std::string_view`.
///
/// A minimal conforming type:
/// @code{.cpp}
/// struct CorrectOnly {
///   std::string_view name() const { return "correct-only"; }
///   cuda_agent::Reward reward(const cuda_agent::Evaluation& evaluation) const {
///     return evaluation.correct() ? cuda_agent::Reward{1, "correct", "verified"}
///                                 : cuda_agent::Reward{0, "incorrect", "not verified"};
///   }
/// };
/// static_assert(cuda_agent::RewardPolicy<CorrectOnly>);
/// @endcode
template <class R>
concept RewardPolicy = requires(const R& policy, const Evaluation& evaluation) {
  { policy.reward(evaluation) } -> std::same_as<Reward>;
  { policy.name() } -> std::convertible_to<std::string_view>;
};

/// Holds any `RewardPolicy` by value (move-only) behind one type.
class AnyRewardPolicy {
 public:
  template <class R>
  requires(RewardPolicy<std::remove_cvref_t<R>> && !std::is_same_v<std::remove_cvref_t<R>, AnyRewardPolicy>)
      AnyRewardPolicy(R&& policy)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<R>>>(std::forward<R>(policy))) {}

  AnyRewardPolicy(AnyRewardPolicy&&) noexcept = default;
  AnyRewardPolicy& operator=(AnyRewardPolicy&&) noexcept = default;

  [[nodiscard]] Reward reward(const Evaluation& evaluation) const { return self_->reward(evaluation); }
  [[nodiscard]] std::string_view name() const { return self_->name(); }

 private:
  struct Interface {
    virtual ~Interface() = default;
    [[nodiscard]] virtual Reward reward(const Evaluation& evaluation) const = 0;
    [[nodiscard]] virtual std::string_view name() const = 0;
  };
  template <class R>
  struct Model final : Interface {
    explicit Model(R value) : policy(std::move(value)) {}
    [[nodiscard]] Reward reward(const Evaluation& evaluation) const override { return policy.reward(evaluation); }
    [[nodiscard]] std::string_view name() const override { return policy.name(); }
    R policy;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(RewardPolicy<AnyRewardPolicy>);

}  // namespace cuda_agent
