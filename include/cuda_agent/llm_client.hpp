// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `LlmClient` concept: one chat turn, messages and tool specifications in, one
/// assistant message out. Its refinement `ResumableLlmClient` names clients that play
/// recorded answers and can skip those a resumed episode already has. `AnyLlmClient`
/// stores any conforming type behind one type.

#include <concepts>     // same_as, convertible_to
#include <memory>       // unique_ptr, make_unique
#include <string>       // string
#include <string_view>  // string_view
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move

#include "cuda_agent/message.hpp"

namespace cuda_agent {

/// A backend that answers one chat turn.
///
/// Required expressions, for `C& client` and `const ChatRequest& request`:
///   - `client.complete(request)` returns a `ChatResponse`: the assistant message (text,
///     reasoning, tool calls with parsed and raw arguments), the finish reason and the
///     token usage. Failures are thrown as `LlmError`, whose kind tells the caller
///     whether to compact (`context_overflow`), give up (`fatal`) or report (`retriable`
///     after the client's own retries ran out). Malformed tool-call arguments are not
///     failures: they are returned in `ToolCall::argument_error` for the model to fix.
///   - `client.name()` returns something convertible to `std::string_view` that
///     identifies the backend and model in reports and trajectories.
///
/// Independent client objects must be usable from different threads at once; one object
/// need not be.
///
/// A minimal conforming type:
/// @code{.cpp}
/// struct EchoClient {
///   std::string_view name() const { return "echo"; }
///   cuda_agent::ChatResponse complete(const cuda_agent::ChatRequest& request) {
///     cuda_agent::ChatResponse response;
///     response.message = cuda_agent::Message::assistant(request.messages.back().content);
///     response.finish_reason = cuda_agent::FinishReason::stop;
///     return response;
///   }
/// };
/// static_assert(cuda_agent::LlmClient<EchoClient>);
/// @endcode
template <class C>
concept LlmClient = requires(C& client, const C& const_client, const ChatRequest& request) {
  { client.complete(request) } -> std::same_as<ChatResponse>;
  { const_client.name() } -> std::convertible_to<std::string_view>;
};

/// An `LlmClient` that plays recorded answers (ScriptedClient, ReplayClient) and can be
/// told where a resumed episode picks up. The agent loop calls it when it resumes.
///
/// Required expressions, besides `LlmClient`'s, for `C& client` and `int turns`:
///   - `client.resume_after(turns)` skips the first `turns` answers (those the resumed
///     trajectory already holds), so that the next `complete` gives answer `turns + 1`.
///     A client with nothing recorded to skip (a live backend) may accept and ignore it.
///
/// A minimal conforming type (answers "1", "2", ... in turn):
/// @code{.cpp}
/// struct CountingClient {
///   int next = 1;
///   std::string_view name() const { return "counting"; }
///   cuda_agent::ChatResponse complete(const cuda_agent::ChatRequest&) {
///     cuda_agent::ChatResponse response;
///     response.message = cuda_agent::Message::assistant(std::to_string(next++));
///     response.finish_reason = cuda_agent::FinishReason::stop;
///     return response;
///   }
///   void resume_after(int turns) { next = turns + 1; }
/// };
/// static_assert(cuda_agent::ResumableLlmClient<CountingClient>);
/// @endcode
template <class C>
concept ResumableLlmClient = LlmClient<C> && requires(C& client, int turns) {
  client.resume_after(turns);
};

/// Holds any `LlmClient` by value (move-only) behind one type, for clients chosen at run
/// time from a configuration string. Models `ResumableLlmClient` whatever it holds:
/// `resume_after` forwards to a held `ResumableLlmClient` and is ignored by any other.
class AnyLlmClient {
 public:
  template <class C>
  requires(LlmClient<std::remove_cvref_t<C>> && !std::is_same_v<std::remove_cvref_t<C>, AnyLlmClient>)
      AnyLlmClient(C&& client)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<C>>>(std::forward<C>(client))) {}

  AnyLlmClient(AnyLlmClient&&) noexcept = default;
  AnyLlmClient& operator=(AnyLlmClient&&) noexcept = default;

  [[nodiscard]] ChatResponse complete(const ChatRequest& request) { return self_->complete(request); }
  [[nodiscard]] std::string_view name() const { return self_->name(); }

  /// For clients that play recorded answers (scripted, replay): skip the first `turns`
  /// answers because a resumed episode already has them. Clients that are not
  /// `ResumableLlmClient` (live backends) have nothing to skip: it does nothing.
  void resume_after(int turns) { self_->resume_after(turns); }

  /// The wrapped client, if it is a `C`.
  template <class C>
  [[nodiscard]] C* target() noexcept {
    auto* model = dynamic_cast<Model<C>*>(self_.get());
    return model ? &model->client : nullptr;
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual ChatResponse complete(const ChatRequest& request) = 0;
    [[nodiscard]] virtual std::string_view name() const = 0;
    virtual void resume_after(int turns) = 0;
  };
  template <class C>
  struct Model final : Interface {
    explicit Model(C value) : client(std::move(value)) {}
    ChatResponse complete(const ChatRequest& request) override { return client.complete(request); }
    [[nodiscard]] std::string_view name() const override { return client.name(); }
    void resume_after(int turns) override {
      if constexpr (ResumableLlmClient<C>) client.resume_after(turns);
    }
    C client;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(LlmClient<AnyLlmClient>);
static_assert(ResumableLlmClient<AnyLlmClient>);

}  // namespace cuda_agent
