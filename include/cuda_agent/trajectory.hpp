// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Trajectories: one JSON object per line, appended and flushed as an episode happens,
/// so that a crashed run loses nothing and can resume, trainers can read the
/// conversation, and the replay client can play a recorded episode back.
///
/// Every event has `"type"`, `"seq"` (0, 1, 2, ... in file order) and `"time"` (seconds
/// since the Unix epoch, as a number). The types:
///
/// | type         | fields                                                                   |
/// | ------------ | ------------------------------------------------------------------------ |
/// | `header`     | `format` (= 1), `task` {name, hash}, `llm`, `settings` {...}             |
/// | `message`    | `turn`, `message` (OpenAI chat-message shape, see message.hpp), and for  |
/// |              | assistant messages `usage`, `finish_reason`, `duration_ms`; for tool     |
/// |              | messages `duration_ms` and `metadata`                                    |
/// | `evaluation` | `turn`, `candidate_hash`, `evaluation`, `reward`, `best` (bool)          |
/// | `compaction` | `turn`, `kind` ("elide" or "summary"), `detail`                          |
/// | `budget`     | `turn`, `turns`, `prompt_tokens`, `completion_tokens`, `elapsed_s`,      |
/// |              | `cost_usd`                                                               |
/// | `finish`     | `reason`, `message`, `best` {reward, speedup, candidate_hash, directory} |
///
/// The `message` events, in order, are the conversation exactly as the model saw it
/// (before any compaction): `conversation()` extracts them.

#include <chrono>       // system_clock
#include <cstdint>      // int64_t
#include <filesystem>   // path
#include <fstream>      // ofstream, ifstream
#include <iterator>     // istreambuf_iterator
#include <mutex>        // mutex, lock_guard
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string, getline
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/message.hpp"

namespace cuda_agent {

inline constexpr int trajectory_format_version = 1;

/// Appends events to a trajectory file, one line each, flushed before `append` returns.
/// Safe to share between threads.
class TrajectoryWriter {
 public:
  /// Opens `path` for appending, creating it if needed. When the file already holds
  /// events (a resumed run), numbering continues after the last one.
  explicit TrajectoryWriter(std::filesystem::path path) : path_(std::move(path)) {
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
    std::int64_t last = -1;
    if (std::filesystem::exists(path_)) {
      bool torn_tail = false;
      for (const nlohmann::json& event : read_events(path_, &torn_tail)) last = event.value("seq", last);
      // A crash mid-line leaves a torn tail: cut it off, so that the file holds only
      // complete events again and the next one starts a fresh line.
      if (torn_tail) truncate_after_last_newline(path_);
    }
    next_seq_ = last + 1;
    stream_.open(path_, std::ios::app);
    if (!stream_) throw std::runtime_error("cannot open trajectory " + path_.string() + " for appending");
  }

  /// Writes `event` (an object with at least "type") with its sequence number and time.
  void append(nlohmann::json event) {
    if (!event.is_object() || !event.contains("type"))
      throw std::invalid_argument("a trajectory event must be an object with a \"type\"");
    const std::lock_guard lock(mutex_);
    event["seq"] = next_seq_++;
    event["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    stream_ << event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    stream_.flush();
    if (!stream_) throw std::runtime_error("cannot write to trajectory " + path_.string());
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Reads every complete event of a trajectory file. A last line cut short by a crash
  /// is skipped (and reported through `torn_tail`); a damaged line elsewhere is an error.
  [[nodiscard]] static std::vector<nlohmann::json> read_events(const std::filesystem::path& path,
                                                               bool* torn_tail = nullptr) {
    std::ifstream stream(path);
    if (!stream) throw std::runtime_error("cannot read trajectory " + path.string());
    std::vector<nlohmann::json> events;
    std::string line;
    std::size_t line_number = 0;
    std::optional<std::size_t> bad_line;
    if (torn_tail) *torn_tail = false;
    while (std::getline(stream, line)) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (bad_line) throw std::runtime_error(path.string() + ":" + std::to_string(*bad_line) + ": not a JSON event");
      try {
        events.push_back(nlohmann::json::parse(line));
      } catch (const nlohmann::json::parse_error&) {
        bad_line = line_number;  // fatal unless it turns out to be the last line
      }
    }
    if (bad_line && torn_tail) *torn_tail = true;
    return events;
  }

 private:
  static void truncate_after_last_newline(const std::filesystem::path& path) {
    std::ifstream stream(path, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
    const auto newline = content.find_last_of('\n');
    std::filesystem::resize_file(path, newline == std::string::npos ? 0 : newline + 1);
  }

  std::filesystem::path path_;
  std::ofstream stream_;
  std::mutex mutex_;
  std::int64_t next_seq_ = 0;
};

/// Builders for the common events, so producers agree on field names.
namespace trajectory_event {

[[nodiscard]] inline nlohmann::json header(const nlohmann::json& task, std::string_view llm,
                                           nlohmann::json settings = nlohmann::json::object()) {
  return {{"type", "header"},
          {"format", trajectory_format_version},
          {"task", task},
          {"llm", llm},
          {"settings", std::move(settings)}};
}

[[nodiscard]] inline nlohmann::json message(int turn, const Message& message) {
  return {{"type", "message"}, {"turn", turn}, {"message", message}};
}

[[nodiscard]] inline nlohmann::json assistant(int turn, const ChatResponse& response, double duration_ms) {
  nlohmann::json event = message(turn, response.message);
  event["usage"] = response.usage;
  event["finish_reason"] = to_string(response.finish_reason);
  event["duration_ms"] = duration_ms;
  if (!response.model.empty()) event["model"] = response.model;
  return event;
}

[[nodiscard]] inline nlohmann::json tool_result(int turn, const Message& message, double duration_ms,
                                                nlohmann::json metadata = nlohmann::json::object()) {
  nlohmann::json event = trajectory_event::message(turn, message);
  event["duration_ms"] = duration_ms;
  event["metadata"] = std::move(metadata);
  return event;
}

[[nodiscard]] inline nlohmann::json evaluation(int turn, std::string_view candidate_hash, nlohmann::json evaluation,
                                               nlohmann::json reward, bool best) {
  return {{"type", "evaluation"},
          {"turn", turn},
          {"candidate_hash", candidate_hash},
          {"evaluation", std::move(evaluation)},
          {"reward", std::move(reward)},
          {"best", best}};
}

[[nodiscard]] inline nlohmann::json compaction(int turn, std::string_view kind, nlohmann::json detail) {
  return {{"type", "compaction"}, {"turn", turn}, {"kind", kind}, {"detail", std::move(detail)}};
}

[[nodiscard]] inline nlohmann::json budget(int turn, int turns, const Usage& usage, double elapsed_s) {
  return {{"type", "budget"},
          {"turn", turn},
          {"turns", turns},
          {"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"elapsed_s", elapsed_s},
          {"cost_usd", usage.cost_usd ? nlohmann::json(*usage.cost_usd) : nlohmann::json(nullptr)}};
}

[[nodiscard]] inline nlohmann::json finish(std::string_view reason, std::string_view message, nlohmann::json best) {
  return {{"type", "finish"}, {"reason", reason}, {"message", message}, {"best", std::move(best)}};
}

}  // namespace trajectory_event

/// The conversation recorded in a trajectory: every `message` event's message, in order.
[[nodiscard]] inline std::vector<Message> conversation(const std::vector<nlohmann::json>& events) {
  std::vector<Message> messages;
  for (const nlohmann::json& event : events)
    if (event.value("type", "") == "message") messages.push_back(event.at("message").get<Message>());
  return messages;
}

}  // namespace cuda_agent
