// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What resuming an episode from its trajectory needs besides replaying the events into
/// the loop: which endings may go on, what the replay found out about where the episode
/// stood, and what the file tools knew before the crash.

#include <algorithm>     // find
#include <filesystem>    // path, weakly_canonical, last_write_time
#include <iterator>      // begin, end
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <vector>        // vector

#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/tool.hpp"

namespace cuda_agent {

/// Whether an episode that ended with `reason` goes on when resumed: one that was
/// cancelled, hit a backend error or ran out of a budget does (under the current
/// options); one that completed, got stuck or ran out of context is only reported again.
[[nodiscard]] inline bool resumable(StopReason reason) noexcept {
  return reason != StopReason::completed && reason != StopReason::stuck && reason != StopReason::context_exhausted;
}

namespace detail {

/// Where the replayed trajectory left the episode.
struct RestoredEpisode {
  bool finished = false;
  StopReason finish_reason = StopReason::completed;
  std::string finish_message;
  std::vector<ToolCall> unanswered;
  ChatResponse last_response;
  bool finish_called = false;
  bool model_stopped = false;
  /// The last turn whose end (scoring, budget record) was recorded.
  int closed_turn = -1;
};

/// File tools refuse to overwrite what the model has not read in this episode; a
/// resumed episode knows what it read before the crash.
inline void restore_file_knowledge(const std::filesystem::path& workspace, ToolContext& tool_context,
                                   const ToolCall& call, const ToolResult& result) {
  if (result.is_error) return;
  static constexpr std::string_view file_tools[] = {"Read", "Write", "Edit", "MultiEdit"};
  if (std::find(std::begin(file_tools), std::end(file_tools), call.name) == std::end(file_tools)) return;
  const auto path_argument = call.arguments.find("file_path");
  if (path_argument == call.arguments.end() || !path_argument->is_string()) return;
  std::filesystem::path path = path_argument->get<std::string>();
  if (path.is_relative()) path = workspace / path;
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, error);
  const auto modified = std::filesystem::last_write_time(error ? path : resolved, error);
  if (!error) tool_context.record_read(resolved, modified);
}

}  // namespace detail

}  // namespace cuda_agent
