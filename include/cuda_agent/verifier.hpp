// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Verifier` concept: decide whether a built candidate computes the task's reference
/// function, and if not, say why in terms a program and a model can act on. Its
/// refinements name what a verifier may offer besides: `PrescreeningVerifier` (judge the
/// sources before they are built), `LibraryPolicyVerifier` (say what a task's build may
/// link) and `PolicyVerifier` (take a request's policy with each call). `AnyVerifier` holds
/// any verifier by value, `SharedVerifier` shares one.

#include <concepts>     // same_as
#include <map>          // map
#include <memory>       // unique_ptr, make_unique, shared_ptr
#include <optional>     // optional, nullopt
#include <stdexcept>    // invalid_argument
#include <string>       // string
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/library_policy.hpp"
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

/// A `Verifier` that can judge a candidate from its sources alone, before they are built
/// (HarnessVerifier's static checks). An evaluator that has one runs it first, so that a
/// candidate with a forbidden construct is rejected for it and never reaches a compiler,
/// whose errors could otherwise hide the reason.
///
/// Required expressions, besides `Verifier`'s, for `V& verifier`, `const Task& task` and
/// `const std::map<std::string, std::string>& files` (the candidate's source files, by
/// path relative to the candidate directory: model_new.py and kernels/...):
///   - `verifier.prescreen(task, files)` returns a `std::optional<Rejection>`: the reason
///     the sources are rejected, or nothing when they give no reason (which promises
///     nothing: `verify` judges the built candidate in full). Exceptions are reserved for
///     the verifier's own failures.
///
/// A minimal conforming type (which rejects sources that mention `eval`):
/// @code{.cpp}
/// struct NoEval {
///   cuda_agent::VerificationResult verify(const cuda_agent::Task&, const cuda_agent::Candidate&) {
///     return {};
///   }
///   std::optional<cuda_agent::Rejection> prescreen(const cuda_agent::Task&,
///                                                  const std::map<std::string, std::string>& files) {
///     for (const auto& [path, text] : files)
///       if (text.find("eval(") != std::string::npos)
///         return cuda_agent::Rejection{cuda_agent::RejectionReason::forbidden_construct, path + " calls eval", {}};
///     return std::nullopt;
///   }
/// };
/// static_assert(cuda_agent::PrescreeningVerifier<NoEval>);
/// @endcode
template <class V>
concept PrescreeningVerifier = Verifier<V> &&
    requires(V& verifier, const Task& task, const std::map<std::string, std::string>& files) {
  { verifier.prescreen(task, files) } -> std::same_as<std::optional<Rejection>>;
};

/// A `Verifier` that knows each task's library policy (HarnessVerifier derives it from the
/// reference's operators): whoever builds a candidate for it links what that policy allows,
/// within what the compile driver allows.
///
/// Required expressions, besides `Verifier`'s, for `V& verifier` and `const Task& task`:
///   - `verifier.library_policy(task)` returns the `LibraryPolicy` of the task, resolved
///     (`derive_from_reference` off). The same task gives the same policy every time.
///
/// A minimal conforming type (no external libraries for any task):
/// @code{.cpp}
/// struct NoLibraries {
///   cuda_agent::VerificationResult verify(const cuda_agent::Task&, const cuda_agent::Candidate&) {
///     return {};
///   }
///   cuda_agent::LibraryPolicy library_policy(const cuda_agent::Task&) {
///     return cuda_agent::LibraryPolicy{}.for_task(false, false);
///   }
/// };
/// static_assert(cuda_agent::LibraryPolicyVerifier<NoLibraries>);
/// @endcode
template <class V>
concept LibraryPolicyVerifier = Verifier<V> && requires(V& verifier, const Task& task) {
  { verifier.library_policy(task) } -> std::same_as<LibraryPolicy>;
};

/// A verifier that takes a request's `EvaluationPolicy` with each call: its tolerance
/// profile and library policy replace the verifier's own for that call alone, so that one
/// verifier (and whatever it keeps warm) serves requests that chose differently.
///
/// Required expressions, besides those of `PrescreeningVerifier` and
/// `LibraryPolicyVerifier`, for `V& verifier`, `const Task& task`, `const Candidate&
/// candidate`, `const std::map<std::string, std::string>& files` and `const
/// EvaluationPolicy& policy`, each doing what its form without `policy` does, under `policy`
/// (an empty policy changes nothing):
///   - `verifier.verify(task, candidate, policy)` returns a `VerificationResult`;
///   - `verifier.prescreen(task, files, policy)` returns a `std::optional<Rejection>`;
///   - `verifier.library_policy(task, policy)` returns the `LibraryPolicy` of the task.
///
/// A minimal conforming type (which accepts everything, and allows no library a request
/// does not name):
/// @code{.cpp}
/// struct AcceptAll {
///   cuda_agent::VerificationResult verify(const cuda_agent::Task&, const cuda_agent::Candidate&,
///                                         const cuda_agent::EvaluationPolicy& = {}) {
///     cuda_agent::VerificationResult result;
///     result.correct = true;
///     return result;
///   }
///   std::optional<cuda_agent::Rejection> prescreen(const cuda_agent::Task&, const std::map<std::string, std::string>&,
///                                                  const cuda_agent::EvaluationPolicy& = {}) {
///     return std::nullopt;
///   }
///   cuda_agent::LibraryPolicy library_policy(const cuda_agent::Task&,
///                                            const cuda_agent::EvaluationPolicy& policy = {}) {
///     return policy.libraries.value_or(cuda_agent::LibraryPolicy{}.for_task(false, false));
///   }
/// };
/// static_assert(cuda_agent::PolicyVerifier<AcceptAll>);
/// @endcode
template <class V>
concept PolicyVerifier = PrescreeningVerifier<V> && LibraryPolicyVerifier<V> &&
    requires(V& verifier, const Task& task, const Candidate& candidate, const std::map<std::string, std::string>& files,
             const EvaluationPolicy& policy) {
  { verifier.verify(task, candidate, policy) } -> std::same_as<VerificationResult>;
  { verifier.prescreen(task, files, policy) } -> std::same_as<std::optional<Rejection>>;
  { verifier.library_policy(task, policy) } -> std::same_as<LibraryPolicy>;
};

/// Holds any `Verifier` by value (move-only) behind one type. Models `PrescreeningVerifier`
/// whatever it holds: `prescreen` forwards to a held `PrescreeningVerifier` and gives no
/// reason for any other. It does not model `LibraryPolicyVerifier` (there is no policy
/// that means "the compile driver's own"); keep the concrete type, or `SharedVerifier`,
/// where the build must follow the verifier's policy.
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
  [[nodiscard]] std::optional<Rejection> prescreen(const Task& task, const std::map<std::string, std::string>& files) {
    return self_->prescreen(task, files);
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual VerificationResult verify(const Task& task, const Candidate& candidate) = 0;
    virtual std::optional<Rejection> prescreen(const Task& task, const std::map<std::string, std::string>& files) = 0;
  };
  template <class V>
  struct Model final : Interface {
    explicit Model(V value) : verifier(std::move(value)) {}
    VerificationResult verify(const Task& task, const Candidate& candidate) override {
      return verifier.verify(task, candidate);
    }
    std::optional<Rejection> prescreen(const Task& task, const std::map<std::string, std::string>& files) override {
      if constexpr (PrescreeningVerifier<V>)
        return verifier.prescreen(task, files);
      else
        return std::nullopt;
    }
    V verifier;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(Verifier<AnyVerifier>);
static_assert(PrescreeningVerifier<AnyVerifier>);

/// A verifier shared with something else that needs it (the Verify tool, the profiler's
/// `WorkerTimingLauncher` borrowing HarnessVerifier's warm workers): forwards to the
/// shared one, and models exactly the refinements `V` models (`PrescreeningVerifier`,
/// `LibraryPolicyVerifier`, `PolicyVerifier`), so that an evaluator holding it runs the same
/// stages as one holding `V` itself.
template <Verifier V>
class SharedVerifier {
 public:
  explicit SharedVerifier(std::shared_ptr<V> verifier) : verifier_(std::move(verifier)) {
    if (!verifier_) throw std::invalid_argument("SharedVerifier needs a verifier");
    // Here, where the class is complete: nothing V offers is lost in the forwarding.
    static_assert(Verifier<SharedVerifier>);
    static_assert(PrescreeningVerifier<SharedVerifier> == PrescreeningVerifier<V>);
    static_assert(LibraryPolicyVerifier<SharedVerifier> == LibraryPolicyVerifier<V>);
    static_assert(PolicyVerifier<SharedVerifier> == PolicyVerifier<V>);
  }

  [[nodiscard]] VerificationResult verify(const Task& task, const Candidate& candidate) {
    return verifier_->verify(task, candidate);
  }

  [[nodiscard]] std::optional<Rejection> prescreen(
      const Task& task, const std::map<std::string, std::string>& files) requires PrescreeningVerifier<V> {
    return verifier_->prescreen(task, files);
  }

  [[nodiscard]] LibraryPolicy library_policy(const Task& task) requires LibraryPolicyVerifier<V> {
    return verifier_->library_policy(task);
  }

  [[nodiscard]] VerificationResult verify(const Task& task, const Candidate& candidate,
                                          const EvaluationPolicy& policy) requires PolicyVerifier<V> {
    return verifier_->verify(task, candidate, policy);
  }

  [[nodiscard]] std::optional<Rejection> prescreen(const Task& task, const std::map<std::string, std::string>& files,
                                                   const EvaluationPolicy& policy) requires PolicyVerifier<V> {
    return verifier_->prescreen(task, files, policy);
  }

  [[nodiscard]] LibraryPolicy library_policy(const Task& task,
                                             const EvaluationPolicy& policy) requires PolicyVerifier<V> {
    return verifier_->library_policy(task, policy);
  }

  [[nodiscard]] V& shared() noexcept { return *verifier_; }

 private:
  std::shared_ptr<V> verifier_;
};

}  // namespace cuda_agent
