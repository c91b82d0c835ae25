// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Verifier` concept: decide whether a built candidate computes the task's reference
/// function, and if not, say why in terms a program and a model can act on.

#include <concepts>     // same_as
#include <memory>       // unique_ptr, make_unique
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/task.hpp"

namespace cuda_agent {

/// Decides correctness.
///
/// Required expressions, for `V& verifier`, `const Task& task` and `const Candidate& candidate`
/// (already built: `candidate.build_directory` holds the extension):
///   - `verifier.verify(task, candidate)` returns a `VerificationResult`. `correct` is
///     true only if every check passed; otherwise `rejection` holds a reason code and a
///     message such as the first mismatching index with expected and actual values.
///     Whatever the candidate does (crash, hang, cheat) ends in a result; exceptions are
///     reserved for the verifier's own failures.
///
/// A conforming verifier trusts nothing computed in a process that ran candidate code:
/// see ARCHITECTURE.md section 4 for the invariants the shipped one keeps.
///
/// A minimal conforming type (which accepts nothing):
/// @code{.cpp}
/// struct RejectAll {
///   cuda_agent::VerificationResult verify(const cuda_agent::Task&, const cuda_agent::Candidate&) {
///     cuda_agent::VerificationResult result;
///     result.rejection = cuda_agent::Rejection{cuda_agent::RejectionReason::harness_error, "not implemented", {}};
///     return result;
///   }
/// };
/// static_assert(cuda_agent::Verifier<RejectAll>);
/// @endcode
template <class V>
concept Verifier = requires(V& verifier, const Task& task, const Candidate& candidate) {
  { verifier.verify(task, candidate) } -> std::same_as<VerificationResult>;
};

/// Holds any `Verifier` by value (move-only) behind one type.
class AnyVerifier {
 public:
  template <class V>
    requires(Verifier<std::remove_cvref_t<V>> && !std::is_same_v<std::remove_cvref_t<V>, AnyVerifier>)
  AnyVerifier(V&& verifier)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<V>>>(std::forward<V>(verifier))) {}

  AnyVerifier(AnyVerifier&&) noexcept = default;
  AnyVerifier& operator=(AnyVerifier&&) noexcept = default;

  [[nodiscard]] VerificationResult verify(const Task& task, const Candidate& candidate) {
    return self_->verify(task, candidate);
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual VerificationResult verify(const Task& task, const Candidate& candidate) = 0;
  };
  template <class V>
  struct Model final : Interface {
    explicit Model(V value) : verifier(std::move(value)) {}
    VerificationResult verify(const Task& task, const Candidate& candidate) override {
      return verifier.verify(task, candidate);
    }
    V verifier;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(Verifier<AnyVerifier>);

}  // namespace cuda_agent
