// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What the model sees of an episode, kept inside its context budget.
///
/// Three layers, cheapest first:
///   1. Every observation is capped when it arrives: the head and the tail are kept and
///      the elided count is stated (compiler errors sit at the head, summaries at the tail).
///   2. When the estimated prompt nears the budget, older tool outputs (and large
///      arguments of older tool calls, such as whole files written) are replaced by a
///      line saying what was removed.
///   3. If that is not enough, the older turns are folded into one summary message.
///
/// The system prompt, the task and the note of the best result so far are never removed.
/// Assistant messages and the tool results answering them are kept or folded together,
/// so no backend ever sees a tool result without its call.
///
/// Every change is described by a JSON operation that `apply` replays, so a resumed
/// episode rebuilds exactly the window the model saw before the crash.

#include <algorithm>    // max, min, clamp
#include <cstddef>      // size_t, ptrdiff_t
#include <cstdint>      // int64_t
#include <functional>   // function
#include <iterator>     // make_move_iterator
#include <optional>     // optional
#include <stdexcept>    // invalid_argument
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/message.hpp"

namespace cuda_agent {

/// How a message is treated when the window is compacted.
enum class ContextRole {
  normal,       ///< may be elided or folded into a summary
  pinned,       ///< the system prompt and the task: never removed
  best_result,  ///< the note of the best result so far: kept until a newer one replaces it
};

[[nodiscard]] constexpr std::string_view to_string(ContextRole role) noexcept {
  switch (role) {
    case ContextRole::normal:
      return "normal";
    case ContextRole::pinned:
      return "pinned";
    case ContextRole::best_result:
      return "best_result";
  }
  return "normal";
}

[[nodiscard]] inline ContextRole parse_context_role(std::string_view text) noexcept {
  if (text == "pinned") return ContextRole::pinned;
  if (text == "best_result") return ContextRole::best_result;
  return ContextRole::normal;
}

struct ContextOptions {
  /// The backend's context window.
  std::int64_t window_tokens = 131'072;
  /// Kept free for the model's answer and for estimation error.
  std::int64_t reserve_tokens = 16'384;
  /// Compaction shrinks the prompt to this fraction of the usable budget, so that it does
  /// not run again at the very next turn.
  double compaction_target = 0.6;
  /// Longest observation the model is shown; longer ones keep head and tail.
  std::size_t observation_char_limit = 30'000;
  /// The newest tool outputs are never elided.
  std::size_t keep_recent_observations = 6;
  /// Arguments of older tool calls longer than this are elided (files written, edits).
  std::size_t argument_char_limit = 2'000;
  /// The newest turns are never folded into the summary.
  std::size_t keep_recent_turns = 6;
  /// Longest summary kept; older summary lines go first.
  std::size_t summary_char_limit = 12'000;
  /// Writes the summary of folded messages. Unset: a deterministic account of the
  /// actions and their outcomes (no model call). A host can plug in a model-written one.
  std::function<std::string(const std::vector<Message>& folded, std::string_view previous_summary)> summarizer;
};

/// Keeps the head and the tail of `text` within `limit` characters and says how much of
/// the middle was removed. Cuts fall on UTF-8 character boundaries.
[[nodiscard]] inline std::string cap_observation(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  auto boundary = [&](std::size_t position) {
    while (position > 0 && position < text.size() && (static_cast<unsigned char>(text[position]) & 0xC0) == 0x80)
      --position;
    return position;
  };
  const std::size_t head_end = boundary(limit - limit / 2);
  const std::size_t tail_start = std::max(head_end, boundary(text.size() - limit / 2));
  const std::string_view middle = text.substr(head_end, tail_start - head_end);
  const auto lines = static_cast<std::size_t>(std::count(middle.begin(), middle.end(), '\n'));
  std::string capped(text.substr(0, head_end));
  capped += "\n[... " + std::to_string(middle.size()) + " characters (" + std::to_string(lines) +
            " lines) elided from the middle of this output ...]\n";
  capped += text.substr(tail_start);
  return capped;
}

/// The outcome of one compaction.
struct CompactionOutcome {
  /// Estimated prompt tokens before and after.
  std::int64_t tokens_before = 0;
  std::int64_t tokens_after = 0;
  /// One JSON operation per stage that changed something: {"kind": "elide" | "summary",
  /// "detail": {...}}; feed each to `ContextWindow::apply` to replay it.
  std::vector<nlohmann::json> operations;

  [[nodiscard]] bool shrunk() const noexcept { return tokens_after < tokens_before; }
};

class ContextWindow {
 public:
  explicit ContextWindow(ContextOptions options = {}) : options_(std::move(options)) {}

  [[nodiscard]] const ContextOptions& options() const noexcept { return options_; }

  /// Adds the next message of the conversation. Messages are numbered in arrival order;
  /// operations refer to these numbers. A new best-result note demotes the previous one.
  void append(Message message, ContextRole role = ContextRole::normal) {
    if (role == ContextRole::best_result)
      for (Entry& entry : entries_)
        if (entry.role == ContextRole::best_result) entry.role = ContextRole::normal;
    entries_.push_back({next_index_++, std::move(message), role, false, false, false, 0, 0});
  }

  /// The messages to send, in order.
  [[nodiscard]] std::vector<Message> messages() const {
    std::vector<Message> result;
    result.reserve(entries_.size());
    for (const Entry& entry : entries_) result.push_back(entry.message);
    return result;
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// Messages appended so far (the conversation's length, before any compaction).
  [[nodiscard]] std::size_t conversation_length() const noexcept { return next_index_; }

  /// Characters outside the messages that every request carries (tool specifications).
  void set_fixed_characters(std::size_t characters) noexcept { fixed_characters_ = characters; }

  /// Learns tokens per character from the backend's exact count of the prompt just sent.
  void calibrate(std::int64_t prompt_tokens, std::size_t characters_sent) noexcept {
    if (prompt_tokens <= 0 || characters_sent == 0) return;
    tokens_per_character_ =
        std::clamp(static_cast<double>(prompt_tokens) / static_cast<double>(characters_sent), 0.05, 1.5);
  }

  /// Characters the next request would carry.
  [[nodiscard]] std::size_t characters() const noexcept {
    std::size_t total = fixed_characters_;
    for (const Entry& entry : entries_) total += characters_of(entry.message);
    return total;
  }

  [[nodiscard]] std::int64_t estimated_tokens() const noexcept {
    return static_cast<std::int64_t>(static_cast<double>(characters()) * tokens_per_character_);
  }

  /// The window, lowered when the backend has said a prompt was too long.
  [[nodiscard]] std::int64_t window_tokens() const noexcept {
    return std::min(options_.window_tokens, learned_window_tokens_.value_or(options_.window_tokens));
  }

  /// Prompt tokens allowed before compaction must run.
  [[nodiscard]] std::int64_t usable_tokens() const noexcept {
    return window_tokens() - std::min(options_.reserve_tokens, window_tokens() / 4);
  }

  [[nodiscard]] bool needs_compaction() const noexcept { return estimated_tokens() > usable_tokens(); }

  /// The backend rejected the current prompt as too long: whatever the estimate says, the
  /// real window is smaller than this prompt.
  void note_overflow() noexcept {
    const std::int64_t estimate = estimated_tokens();
    const std::int64_t learned = std::max<std::int64_t>(estimate - estimate / 10, 1);
    learned_window_tokens_ = std::min(learned_window_tokens_.value_or(learned), learned);
  }

  /// Shrinks the window below the compaction target: elision first, then a summary.
  /// `force` compacts even when the estimate is within budget (the backend disagreed).
  [[nodiscard]] CompactionOutcome compact(bool force = false) {
    CompactionOutcome outcome;
    outcome.tokens_before = estimated_tokens();
    outcome.tokens_after = outcome.tokens_before;
    if (!force && !needs_compaction()) return outcome;
    const auto target = static_cast<std::int64_t>(static_cast<double>(usable_tokens()) * options_.compaction_target);
    if (auto elision = elide_until(target, options_.keep_recent_observations))
      outcome.operations.push_back(std::move(*elision));
    for (std::size_t keep = options_.keep_recent_turns; estimated_tokens() > target; keep /= 2) {
      if (auto summary = summarize_keeping(keep)) outcome.operations.push_back(std::move(*summary));
      if (keep <= 1) break;
    }
    // Last resort: every output but those of the newest turn, which the model has not read yet.
    if (estimated_tokens() > target)
      if (auto elision = elide_until(target, outputs_of_newest_turn()))
        outcome.operations.push_back(std::move(*elision));
    outcome.tokens_after = estimated_tokens();
    return outcome;
  }

  /// Replays an operation recorded from `compact`.
  void apply(const nlohmann::json& operation) {
    const std::string kind = operation.at("kind").get<std::string>();
    const nlohmann::json& detail = operation.at("detail");
    if (kind == "elide") {
      for (const auto& index : detail.value("observations", nlohmann::json::array()))
        if (Entry* entry = find(index.get<std::size_t>())) elide_observation(*entry);
      for (const auto& index : detail.value("arguments", nlohmann::json::array()))
        if (Entry* entry = find(index.get<std::size_t>())) elide_arguments(*entry);
    } else if (kind == "summary") {
      fold(detail.at("first").get<std::size_t>(), detail.at("last").get<std::size_t>(),
           detail.at("summary").get<std::string>());
    } else {
      throw std::invalid_argument("unknown context operation '" + kind + "'");
    }
  }

  /// Characters a message contributes to a request, with a small allowance for framing.
  [[nodiscard]] static std::size_t characters_of(const Message& message) noexcept {
    std::size_t total = 16 + message.content.size() + message.reasoning.text.size();
    for (const ToolCall& call : message.tool_calls) total += 24 + call.name.size() + call.raw_arguments.size();
    return total;
  }

 private:
  struct Entry {
    std::size_t index;  ///< position in the conversation; a summary takes its first folded index
    Message message;
    ContextRole role;
    bool observation_elided;
    bool arguments_elided;
    bool summary;
    std::size_t folded_first;  ///< summaries: the conversation range they stand for
    std::size_t folded_last;
  };

  [[nodiscard]] Entry* find(std::size_t index) noexcept {
    for (Entry& entry : entries_)
      if (!entry.summary && entry.index == index) return &entry;
    return nullptr;
  }

  static void elide_observation(Entry& entry) {
    if (entry.observation_elided || entry.message.role != Role::tool) return;
    const std::string& content = entry.message.content;
    const auto lines = static_cast<std::size_t>(std::count(content.begin(), content.end(), '\n')) + 1;
    entry.message.content = "[Older output elided to save context: " + std::to_string(content.size()) +
                            " characters, " + std::to_string(lines) +
                            " lines. Run the tool again if you still need it.]";
    entry.observation_elided = true;
  }

  static void elide_arguments(Entry& entry) {
    if (entry.arguments_elided) return;
    for (ToolCall& call : entry.message.tool_calls) {
      if (!call.arguments.is_object()) continue;
      bool changed = false;
      for (auto& [key, value] : call.arguments.items()) {
        if (!value.is_string() || value.get_ref<const std::string&>().size() <= 200) continue;
        value = "[" + std::to_string(value.get_ref<const std::string&>().size()) + " characters elided]";
        changed = true;
      }
      if (changed) call.raw_arguments = call.arguments.dump();
    }
    entry.arguments_elided = true;
  }

  /// Tool outputs oldest first, then large arguments of older calls, until under `target`.
  [[nodiscard]] std::optional<nlohmann::json> elide_until(std::int64_t target, std::size_t keep_observations) {
    std::vector<std::size_t> tool_positions;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].message.role == Role::tool && !entries_[i].observation_elided) tool_positions.push_back(i);
    const std::size_t keep = std::min(keep_observations, tool_positions.size());
    nlohmann::json observations = nlohmann::json::array();
    nlohmann::json arguments = nlohmann::json::array();
    for (std::size_t k = 0; k + keep < tool_positions.size() && estimated_tokens() > target; ++k) {
      Entry& entry = entries_[tool_positions[k]];
      if (entry.role != ContextRole::normal) continue;
      elide_observation(entry);
      observations.push_back(entry.index);
    }
    const std::size_t recent_start = start_of_recent_turns(options_.keep_recent_turns);
    for (std::size_t i = 0; i < recent_start && estimated_tokens() > target; ++i) {
      Entry& entry = entries_[i];
      if (entry.message.role != Role::assistant || entry.arguments_elided || entry.role != ContextRole::normal)
        continue;
      std::size_t argument_characters = 0;
      for (const ToolCall& call : entry.message.tool_calls) argument_characters += call.raw_arguments.size();
      if (argument_characters <= options_.argument_char_limit) continue;
      elide_arguments(entry);
      arguments.push_back(entry.index);
    }
    if (observations.empty() && arguments.empty()) return std::nullopt;
    return nlohmann::json{{"kind", "elide"}, {"detail", {{"observations", observations}, {"arguments", arguments}}}};
  }

  [[nodiscard]] std::size_t outputs_of_newest_turn() const noexcept {
    std::size_t count = 0;
    for (std::size_t i = entries_.size(); i-- > 0 && entries_[i].message.role != Role::assistant;)
      if (entries_[i].message.role == Role::tool) ++count;
    return count;
  }

  /// Position of the first entry of the last `turns` turns (a turn starts at an assistant
  /// message); entries before it may be folded.
  [[nodiscard]] std::size_t start_of_recent_turns(std::size_t turns) const noexcept {
    std::size_t seen = 0;
    for (std::size_t i = entries_.size(); i-- > 0;) {
      if (entries_[i].message.role == Role::assistant && ++seen == std::max<std::size_t>(turns, 1)) return i;
    }
    return 0;
  }

  /// Folds every foldable entry before the last `keep_turns` turns into one summary.
  [[nodiscard]] std::optional<nlohmann::json> summarize_keeping(std::size_t keep_turns) {
    const std::size_t end = start_of_recent_turns(keep_turns);
    std::optional<std::size_t> first;
    std::size_t last = 0;
    for (std::size_t i = 0; i < end; ++i) {
      const Entry& entry = entries_[i];
      if (entry.role != ContextRole::normal && !entry.summary) continue;
      const std::size_t entry_first = entry.summary ? entry.folded_first : entry.index;
      const std::size_t entry_last = entry.summary ? entry.folded_last : entry.index;
      if (!first) first = entry_first;
      last = std::max(last, entry_last);
    }
    if (!first) return std::nullopt;
    // A lone summary cannot be folded any further.
    std::size_t foldable = 0;
    for (std::size_t i = 0; i < end; ++i)
      if (entries_[i].role == ContextRole::normal && !entries_[i].summary) ++foldable;
    if (foldable == 0) return std::nullopt;

    std::vector<Message> folded;
    std::string previous;
    for (std::size_t i = 0; i < end; ++i) {
      const Entry& entry = entries_[i];
      if (entry.summary)
        previous = summary_body(entry.message.content);
      else if (entry.role == ContextRole::normal)
        folded.push_back(entry.message);
    }
    std::string body = options_.summarizer ? options_.summarizer(folded, previous) : describe(folded, previous);
    if (body.size() > options_.summary_char_limit)
      body = "[earlier summary lines dropped]\n" + body.substr(body.size() - options_.summary_char_limit);
    const std::string text = "<conversation_summary>\n" + body + "\n</conversation_summary>";
    fold(*first, last, text);
    return nlohmann::json{{"kind", "summary"}, {"detail", {{"first", *first}, {"last", last}, {"summary", text}}}};
  }

  /// Replaces the foldable entries whose conversation range lies in [first, last] by one
  /// summary message. Pinned entries stay where they are; a best-result note inside the
  /// range moves right behind the summary, so that it stays the latest word on the past.
  void fold(std::size_t first, std::size_t last, const std::string& text) {
    std::vector<Entry> result;
    std::vector<Entry> moved;
    result.reserve(entries_.size());
    std::optional<std::size_t> summary_position;
    for (Entry& entry : entries_) {
      const std::size_t entry_first = entry.summary ? entry.folded_first : entry.index;
      const std::size_t entry_last = entry.summary ? entry.folded_last : entry.index;
      const bool inside = entry_first >= first && entry_last <= last;
      if (!inside || entry.role == ContextRole::pinned) {
        result.push_back(std::move(entry));
        continue;
      }
      if (!summary_position) {
        summary_position = result.size();
        result.push_back({first, Message::user(text), ContextRole::normal, false, false, true, first, last});
      }
      if (entry.role == ContextRole::best_result) moved.push_back(std::move(entry));
    }
    if (summary_position)
      result.insert(result.begin() + static_cast<std::ptrdiff_t>(*summary_position + 1),
                    std::make_move_iterator(moved.begin()), std::make_move_iterator(moved.end()));
    entries_ = std::move(result);
  }

  [[nodiscard]] static std::string summary_body(const std::string& text) {
    constexpr std::string_view open = "<conversation_summary>\n";
    constexpr std::string_view close = "\n</conversation_summary>";
    std::string_view body = text;
    if (body.substr(0, open.size()) == open) body.remove_prefix(open.size());
    if (body.size() >= close.size() && body.substr(body.size() - close.size()) == close)
      body.remove_suffix(close.size());
    return std::string(body);
  }

  [[nodiscard]] static std::string first_line(std::string_view text, std::size_t limit) {
    const auto start = text.find_first_not_of(" \t\r\n");
    if (start == std::string_view::npos) return "(no output)";
    text.remove_prefix(start);
    std::string line(text.substr(0, std::min(text.find('\n'), limit)));
    if (line.size() == limit && text.size() > limit) line += "...";
    return line;
  }

  /// A deterministic account of folded messages: what was tried and how it ended.
  [[nodiscard]] static std::string describe(const std::vector<Message>& folded, std::string_view previous) {
    std::string text;
    if (!previous.empty())
      text += std::string(previous) + "\n";
    else
      text +=
          "Earlier turns were condensed to fit the context window. What happened, in order "
          "(earlier file views and outputs are gone: read files again before editing them):\n";
    for (std::size_t i = 0; i < folded.size(); ++i) {
      const Message& message = folded[i];
      if (message.role == Role::assistant) {
        if (!message.content.empty()) text += "- you said: " + first_line(message.content, 300) + "\n";
        for (const ToolCall& call : message.tool_calls) {
          std::string arguments = call.arguments.dump();
          if (arguments.size() > 160) arguments = arguments.substr(0, 160) + "...";
          text += "- " + call.name + " " + arguments;
          for (std::size_t j = i + 1; j < folded.size() && folded[j].role == Role::tool; ++j) {
            if (folded[j].tool_call_id != call.id) continue;
            text += folded[j].is_error ? " -> failed: " : " -> ok: ";
            text += first_line(folded[j].content, 200);
          }
          text += "\n";
        }
      } else if (message.role == Role::user) {
        text += "- note: " + first_line(message.content, 300) + "\n";
      }
    }
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }

  ContextOptions options_;
  std::vector<Entry> entries_;
  std::size_t next_index_ = 0;
  std::size_t fixed_characters_ = 0;
  double tokens_per_character_ = 0.25;
  std::optional<std::int64_t> learned_window_tokens_;
};

}  // namespace cuda_agent
