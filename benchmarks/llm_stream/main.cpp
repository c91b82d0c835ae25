// SPDX-License-Identifier: Apache-2.0
// How fast recorded LLM streams are parsed and assembled (SSE parsing, JSON per event,
// tool-call fragments), fed in network-sized and in tiny pieces. A model emits on the
// order of 100 events per second; this shows how far below that the client's own cost
// stays.
//
//   cuda_agent_benchmark_llm_stream [seconds per case, default 1]
#include <cuda_agent/llm/detail/anthropic_wire.hpp>
#include <cuda_agent/llm/detail/openai_wire.hpp>
#include <cuda_agent/llm/detail/sse_parser.hpp>

#include <cstdio>       // printf
#include <cstdlib>      // atof
#include <ctime>        // clock, CLOCKS_PER_SEC
#include <filesystem>   // path
#include <fstream>      // ifstream
#include <iterator>     // istreambuf_iterator
#include <string>       // string
#include <string_view>  // string_view

namespace {

namespace ca = cuda_agent;

std::string read(const std::string& relative) {
  std::ifstream stream(std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "tests/data/llm" / relative, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

template <class Assembler>
std::size_t assemble(std::string_view stream, std::size_t piece) {
  std::size_t events = 0;
  Assembler assembler("benchmark");
  ca::detail::SseParser parser;
  const auto deliver = [&](ca::detail::SseEvent&& event) {
    ++events;
    assembler.on_event(event);
  };
  for (std::size_t offset = 0; offset < stream.size(); offset += piece)
    parser.feed(stream.substr(offset, piece), deliver);
  parser.finish(deliver);
  const auto response = assembler.finish();
  if (response.finish_reason == ca::FinishReason::unknown) std::fprintf(stderr, "incomplete stream\n");
  return events;
}

template <class Assembler>
void measure(const char* name, const std::string& relative, std::size_t piece, double seconds) {
  const std::string stream = read(relative);
  std::size_t streams = 0, events = 0;
  // Processor time, not wall time: the cost stays comparable on a busy machine.
  const std::clock_t start = std::clock();
  double elapsed = 0;
  do {
    events += assemble<Assembler>(stream, piece);
    ++streams;
    elapsed = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  } while (elapsed < seconds);
  std::printf("| %-38s | %6zu B | %5zu | %8.1f | %10.0f | %9.2f |\n", name, piece, stream.size() / 1024 + 1,
              static_cast<double>(stream.size() * streams) / elapsed / 1e6, static_cast<double>(events) / elapsed,
              elapsed / static_cast<double>(streams) * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  std::printf(
      "| stream | piece | KiB | MB/s (CPU) | events/s (CPU) | us/stream |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const std::size_t piece : {std::size_t{16}, std::size_t{4096}}) {
    measure<ca::detail::OpenAiStreamAssembler>("openai/stream_parallel_tools.sse", "openai/stream_parallel_tools.sse",
                                               piece, seconds);
    measure<ca::detail::OpenAiStreamAssembler>("vllm/stream_reasoning_tools.sse", "vllm/stream_reasoning_tools.sse",
                                               piece, seconds);
    measure<ca::detail::OpenAiStreamAssembler>("llama_server/stream_parallel_calls.sse",
                                               "llama_server/stream_parallel_calls.sse", piece, seconds);
    measure<ca::detail::AnthropicStreamAssembler>("anthropic/stream_thinking_tools.sse",
                                                  "anthropic/stream_thinking_tools.sse", piece, seconds);
  }
  return 0;
}
