// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `ReplayClient`: an `LlmClient` that plays a recorded trajectory back, turn by turn,
/// and reports where the new run departs from the recorded one.
///
/// The trajectory's `message` events (see trajectory.hpp) are split into turns: the
/// messages that led to each assistant message (system and user before the first, tool
/// results and any nudges between later ones), and the assistant message itself with its
/// usage and finish reason. `complete(request)` answers turn k with the k-th recorded
/// assistant message, after comparing the request's new messages (those after its last
/// assistant message) with what the recording had at that point:
///   - a *structural* divergence: a different number of new messages, or a message with
///     another role, tool-call id, tool name or error flag. The run took another path;
///     what follows in the recording may no longer fit.
///   - a *content* divergence: the same structure, different text. Expected between runs
///     (timings, temporary paths, process ids); `ReplayOptions::normalize` can mask such
///     noise before comparing.
/// Divergences are recorded, not thrown, unless `stop_on_structural_divergence` is set.

#include <algorithm>    // min, max, mismatch, count_if
#include <cctype>       // isdigit
#include <cstddef>      // size_t
#include <filesystem>   // path
#include <functional>   // function
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/llm/scripted_client.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/trajectory.hpp"

namespace cuda_agent {

/// Where a replayed run departed from its recording.
struct ReplayDivergence {
  enum class Kind { structure, content };
  Kind kind = Kind::structure;
  /// The turn being answered (0-based: the k-th assistant message of the recording).
  std::size_t turn = 0;
  /// The position among that turn's new messages.
  std::size_t message_index = 0;
  /// What differed, in words.
  std::string detail;
  /// Excerpts around the first difference (content divergences), or the differing values.
  std::string expected;
  std::string actual;
};

[[nodiscard]] constexpr std::string_view to_string(ReplayDivergence::Kind kind) noexcept {
  return kind == ReplayDivergence::Kind::structure ? "structure" : "content";
}

struct ReplayOptions {
  /// Throw `LlmError{fatal}` at the first structural divergence instead of answering.
  bool stop_on_structural_divergence = false;
  /// Applied to both sides' message text before comparing (see `mask_numbers`).
  std::function<std::string(std::string_view)> normalize;

  /// Replaces every run of digits with `#`: timings, sizes and ids stop counting as
  /// content differences.
  [[nodiscard]] static std::string mask_numbers(std::string_view text) {
    std::string masked;
    masked.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(text[i]))) {
        if (masked.empty() || masked.back() != '#') masked.push_back('#');
      } else {
        masked.push_back(text[i]);
      }
    }
    return masked;
  }
};

class ReplayClient {
 public:
  /// Reads a trajectory file. Throws `std::invalid_argument` when it holds no assistant
  /// message or a malformed one.
  explicit ReplayClient(const std::filesystem::path& trajectory, ReplayOptions options = {})
      : ReplayClient(TrajectoryWriter::read_events(trajectory), "replay:" + trajectory.string(), std::move(options)) {}

  ReplayClient(const std::vector<nlohmann::json>& events, std::string name, ReplayOptions options = {})
      : name_(std::move(name)), options_(std::move(options)) {
    std::vector<Message> pending;
    for (const nlohmann::json& event : events) {
      if (!event.is_object() || !event.contains("type") || event["type"] != "message") continue;
      Message message;
      try {
        message = event.at("message").get<Message>();
      } catch (const std::exception& error) {
        throw std::invalid_argument(name_ + ": message event " + event.value("seq", nlohmann::json()).dump() +
                                    " is malformed: " + error.what());
      }
      if (message.role != Role::assistant) {
        pending.push_back(std::move(message));
        continue;
      }
      Turn turn;
      turn.inputs = std::move(pending);
      pending.clear();
      turn.response.message = std::move(message);
      if (event.contains("usage") && event["usage"].is_object()) turn.response.usage = event["usage"].get<Usage>();
      if (event.contains("finish_reason") && event["finish_reason"].is_string())
        turn.response.finish_reason = parse_finish_reason(event["finish_reason"].get<std::string>());
      if (event.contains("model") && event["model"].is_string()) turn.response.model = event["model"];
      turns_.push_back(std::move(turn));
    }
    if (turns_.empty()) throw std::invalid_argument(name_ + ": the trajectory holds no assistant message to replay");
  }

  [[nodiscard]] std::string_view name() const noexcept { return name_; }

  /// The recorded answer for the next turn, after comparing the request with the
  /// recording. Past the last recorded turn, throws `LlmError{fatal}`.
  [[nodiscard]] ChatResponse complete(const ChatRequest& request) {
    if (request.cancellation.stop_requested()) throw LlmError(LlmErrorKind::cancelled, name_ + ": cancelled");
    const std::size_t turn = next_turn_;
    if (turn >= turns_.size()) {
      divergences_.push_back({ReplayDivergence::Kind::structure, turn, 0,
                              "the run asked for more turns than the recording has", std::to_string(turns_.size()),
                              std::to_string(turn + 1)});
      throw LlmError(LlmErrorKind::fatal, name_ + ": the recording has " + std::to_string(turns_.size()) +
                                              " turns; the run asked for turn " + std::to_string(turn + 1));
    }
    const std::size_t structural_before = structural_count();
    compare(turn, new_messages(request.messages), turns_[turn].inputs);
    if (options_.stop_on_structural_divergence && structural_count() > structural_before)
      throw LlmError(LlmErrorKind::fatal, name_ + ": turn " + std::to_string(turn + 1) +
                                              " departs from the recording: " + divergences_.back().detail);
    ++next_turn_;
    detail::replay_as_deltas(turns_[turn].response, request);
    return turns_[turn].response;
  }

  /// Continues a resumed episode: the first `turns` recorded answers were already used.
  void resume_after(int turns) { next_turn_ = std::min(turns_.size(), static_cast<std::size_t>(std::max(turns, 0))); }

  [[nodiscard]] const std::vector<ReplayDivergence>& divergences() const noexcept { return divergences_; }
  [[nodiscard]] bool diverged() const noexcept { return !divergences_.empty(); }
  [[nodiscard]] std::size_t structural_count() const noexcept {
    return static_cast<std::size_t>(std::count_if(divergences_.begin(), divergences_.end(), [](const auto& divergence) {
      return divergence.kind == ReplayDivergence::Kind::structure;
    }));
  }
  /// Recorded assistant turns, and how many have been answered.
  [[nodiscard]] std::size_t turn_count() const noexcept { return turns_.size(); }
  [[nodiscard]] std::size_t turns_answered() const noexcept { return next_turn_; }

 private:
  struct Turn {
    std::vector<Message> inputs;
    ChatResponse response;
  };

  /// The messages after the request's last assistant message: what the caller added
  /// since the previous answer (all of them on the first turn).
  static std::vector<Message> new_messages(const std::vector<Message>& messages) {
    std::size_t start = 0;
    for (std::size_t i = messages.size(); i > 0; --i)
      if (messages[i - 1].role == Role::assistant) {
        start = i;
        break;
      }
    return {messages.begin() + static_cast<std::ptrdiff_t>(start), messages.end()};
  }

  void compare(std::size_t turn, const std::vector<Message>& actual, const std::vector<Message>& expected) {
    const auto structure = [&](std::size_t index, std::string detail, std::string want, std::string got) {
      divergences_.push_back(
          {ReplayDivergence::Kind::structure, turn, index, std::move(detail), std::move(want), std::move(got)});
    };
    if (actual.size() != expected.size())
      structure(std::min(actual.size(), expected.size()),
                "expected " + std::to_string(expected.size()) + " new messages, got " + std::to_string(actual.size()),
                std::to_string(expected.size()), std::to_string(actual.size()));
    for (std::size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
      const Message& want = expected[i];
      const Message& got = actual[i];
      if (want.role != got.role) {
        structure(i, "message role differs", std::string(to_string(want.role)), std::string(to_string(got.role)));
        continue;
      }
      if (want.tool_call_id != got.tool_call_id)
        structure(i, "tool call id differs", want.tool_call_id, got.tool_call_id);
      if (!want.name.empty() && !got.name.empty() && want.name != got.name)
        structure(i, "tool name differs", want.name, got.name);
      if (want.is_error != got.is_error)
        structure(i, "tool error flag differs", want.is_error ? "error" : "success",
                  got.is_error ? "error" : "success");
      const std::string want_text = options_.normalize ? options_.normalize(want.content) : want.content;
      const std::string got_text = options_.normalize ? options_.normalize(got.content) : got.content;
      if (want_text != got_text) {
        const auto [want_at, got_at] =
            std::mismatch(want_text.begin(), want_text.end(), got_text.begin(), got_text.end());
        const auto offset = static_cast<std::size_t>(want_at - want_text.begin());
        const std::size_t from = offset > 40 ? offset - 40 : 0;
        divergences_.push_back({ReplayDivergence::Kind::content, turn, i,
                                "text differs from character " + std::to_string(offset),
                                want_text.substr(std::min(from, want_text.size()), 120),
                                got_text.substr(std::min(from, got_text.size()), 120)});
      }
    }
  }

  std::string name_;
  ReplayOptions options_;
  std::vector<Turn> turns_;
  std::size_t next_turn_ = 0;
  std::vector<ReplayDivergence> divergences_;
};

static_assert(LlmClient<ReplayClient>);
static_assert(ResumableLlmClient<ReplayClient>);

}  // namespace cuda_agent
