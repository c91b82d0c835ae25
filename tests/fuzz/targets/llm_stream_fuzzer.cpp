// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the streaming protocol code: the SSE parser, the OpenAI and
// Anthropic stream assemblers, and tool-call fragment assembly.
//
// Each input is parsed twice, whole and cut into pieces at points derived from its own
// bytes; both runs must agree exactly (events, assembled answer, or failure). Beyond
// crashes and sanitizer reports, the target fails when a piece boundary changes the
// result, or when anything but the documented failures escapes: `LlmFailure` (the
// server's fault, classified) and `std::length_error` (an oversized event).
#include <cuda_agent/llm/detail/anthropic_wire.hpp>
#include <cuda_agent/llm/detail/llm_failure.hpp>
#include <cuda_agent/llm/detail/openai_wire.hpp>
#include <cuda_agent/llm/detail/sse_parser.hpp>

#include <cstddef>      // size_t
#include <cstdint>      // uint8_t, uint64_t
#include <cstdio>       // fprintf
#include <stdexcept>    // length_error
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

namespace {

namespace ca = cuda_agent;

/// Whether `id` has the shape of an id made up for a call the server sent without one
/// (`call_<index>_<12 hex digits>`); those are random by design.
bool is_generated_id(std::string_view id) {
  if (!id.starts_with("call_")) return false;
  const auto underscore = id.find('_', 5);
  if (underscore == std::string_view::npos || underscore == 5 || id.size() != underscore + 13) return false;
  for (std::size_t i = 5; i < underscore; ++i)
    if (id[i] < '0' || id[i] > '9') return false;
  return id.find_first_not_of("0123456789abcdef", underscore + 1) == std::string_view::npos;
}

void blank_generated_ids(nlohmann::json& message) {
  if (!message.contains("tool_calls")) return;
  for (auto& call : message["tool_calls"])
    if (is_generated_id(call.value("id", ""))) call["id"] = "(generated)";
}

/// Cut points from a small generator seeded by the input: pieces of 1 to 16 bytes.
std::vector<std::size_t> piece_sizes(std::string_view input) {
  std::uint64_t state = 1469598103934665603ull;
  for (const char c : input) state = (state ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::vector<std::size_t> sizes;
  for (std::size_t total = 0; total < input.size();) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const std::size_t size = 1 + state % 16;
    sizes.push_back(size);
    total += size;
  }
  return sizes;
}

template <class Assembler>
std::string run(std::string_view input, const std::vector<std::size_t>& sizes) {
  std::string outcome;
  Assembler assembler("fuzz", [&](const ca::StreamDelta& delta) {
    outcome += delta.content.size() + delta.reasoning.size() + delta.tool_call_arguments.size() > 0 ? "d" : "e";
  });
  ca::detail::SseParser parser(1 << 16);
  const auto deliver = [&](ca::detail::SseEvent&& event) {
    outcome += "[" + event.event + "|" + event.data + "|" + event.id + "]";
    assembler.on_event(event);
  };
  try {
    std::size_t offset = 0;
    for (const std::size_t size : sizes) {
      parser.feed(input.substr(offset, size), deliver);
      offset += size;
    }
    parser.finish(deliver);
    const ca::ChatResponse response = assembler.finish();
    nlohmann::json message = response.message;
    blank_generated_ids(message);
    outcome += message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    outcome += std::string(ca::to_string(response.finish_reason)) + nlohmann::json(response.usage).dump();
  } catch (const ca::detail::LlmFailure& failure) {
    outcome += "failure:" + std::string(ca::to_string(failure.kind())) + ":" + failure.what();
  } catch (const std::length_error& error) {
    outcome += std::string("length:") + error.what();
  }
  return outcome;
}

template <class Assembler>
void check_cut_invariance(std::string_view input, const char* name) {
  const std::string whole = run<Assembler>(input, {input.size()});
  const std::string cut = run<Assembler>(input, piece_sizes(input));
  if (whole != cut) {
    std::fprintf(stderr, "%s: the result depends on where the stream is cut\nwhole: %s\ncut:   %s\n", name,
                 whole.c_str(), cut.c_str());
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check_cut_invariance<ca::detail::OpenAiStreamAssembler>(input, "openai");
  check_cut_invariance<ca::detail::AnthropicStreamAssembler>(input, "anthropic");

  // The input as tool-call fragments (a JSON list of them, or one).
  const auto fragments = nlohmann::json::parse(input, nullptr, false);
  if (!fragments.is_discarded()) {
    ca::detail::ToolCallAssembler calls;
    if (fragments.is_array()) {
      for (const auto& fragment : fragments) (void)calls.add(fragment);
    } else {
      (void)calls.add(fragments);
    }
    for (const auto& call : calls.calls())
      if (!call.argument_error && !call.arguments.is_object()) __builtin_trap();
  }
  return 0;
}
