// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `LlmClient` concept: one chat turn, messages and tool specifications in, one
/// assistant message out. `AnyLlmClient` stores any conforming type behind one type.

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

/// Holds any `LlmClient` by value (move-only) behind one type, for clients chosen at run
/// time from a configuration string.
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
  /// answers because a resumed episode already has them. Clients of live backends have
  /// nothing to skip, and ignore it.
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
      if constexpr (requires { client.resume_after(turns); }) client.resume_after(turns);
    }
    C client;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(LlmClient<AnyLlmClient>);

}  // namespace cuda_agent
