// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared by the LLM tests: fixture paths and feeding recorded streams to assemblers.

#include <cuda_agent/llm/detail/sse_parser.hpp>
#include <cuda_agent/message.hpp>

#include <cstddef>      // size_t
#include <exception>    // exception
#include <filesystem>   // path
#include <fstream>      // ifstream
#include <iterator>     // istreambuf_iterator
#include <stdexcept>    // runtime_error, logic_error
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

/// Checks that `text` contains `needle`, showing the text when it does not (the same
/// with Catch2 v2 and v3, whose string matchers differ).
#define CHECK_CONTAINS(text, needle)                                   \
  do {                                                                 \
    const std::string cuda_agent_checked_text_(text);                  \
    INFO(cuda_agent_checked_text_);                                    \
    CHECK(cuda_agent_checked_text_.find(needle) != std::string::npos); \
  } while (false)

namespace cuda_agent::testing {

/// The message of what `action` throws, or "(nothing thrown)".
template <class Action>
std::string thrown_message(Action&& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "(nothing thrown)";
}

/// What `action` throws as an `Error`; the test fails when it throws nothing.
template <class Error, class Action>
Error error_of(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error;
  }
  FAIL("no exception of the expected type was thrown");
  throw std::logic_error("unreachable");
}

inline std::filesystem::path llm_fixture(const std::string& relative) {
  return std::filesystem::path(CUDA_AGENT_TEST_DATA_DIR) / "llm" / relative;
}

inline std::string llm_fixture_text(const std::string& relative) {
  std::ifstream stream(llm_fixture(relative), std::ios::binary);
  if (!stream) throw std::runtime_error("missing fixture " + relative);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

/// Feeds `stream` to an assembler `piece` bytes at a time, as a network would, and
/// returns what it assembled; increments go to `deltas` when given.
template <class Assembler>
ChatResponse assemble_stream(std::string_view stream, std::size_t piece, std::vector<StreamDelta>* deltas = nullptr) {
  Assembler assembler("test", [deltas](const StreamDelta& delta) {
    if (deltas) deltas->push_back(delta);
  });
  detail::SseParser parser;
  const auto deliver = [&](detail::SseEvent&& event) { assembler.on_event(event); };
  for (std::size_t offset = 0; offset < stream.size(); offset += piece)
    parser.feed(stream.substr(offset, piece), deliver);
  parser.finish(deliver);
  return assembler.finish();
}

}  // namespace cuda_agent::testing
