// SPDX-License-Identifier: Apache-2.0
// Talking to a model through a spec string: one turn with a tool on offer, the answer
// streamed as it arrives, then the tool calls and the token counts.
//
//   cuda_agent_example_03_talk_to_a_model openai:gpt-4.1
//   cuda_agent_example_03_talk_to_a_model "vllm:Qwen/Qwen3-32B@http://127.0.0.1:8000/v1"
//   cuda_agent_example_03_talk_to_a_model scripted:examples/03_talk_to_a_model/scripted_model.json
#include <cuda_agent/cuda_agent.hpp>
#ifdef CUDA_AGENT_EXAMPLE_WITH_HTTP
#include <cuda_agent/http/make_client.hpp>
#endif

#include <iostream>

namespace ca = cuda_agent;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <llm spec>   (e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5)\n";
    return 2;
  }
  try {
#ifdef CUDA_AGENT_EXAMPLE_WITH_HTTP
    ca::AnyLlmClient model = ca::http::make_llm_client(argv[1]);
#else
    ca::AnyLlmClient model = ca::make_llm_client(argv[1]);  // replay: and scripted: only
#endif
    ca::ChatRequest request;
    request.messages = {ca::Message::system("You optimize PyTorch models with custom CUDA kernels."),
                        ca::Message::user("The task is in model.py. Start by reading it.")};
    request.tools = {
        {"Read",
         "Reads a file of the workspace.",
         {{"type", "object"}, {"properties", {{"file_path", {{"type", "string"}}}}}, {"required", {"file_path"}}}}};
    request.max_tokens = 1024;
    bool thinking = false;
    request.on_delta = [&thinking](const ca::StreamDelta& delta) {
      if (delta.restarted) std::cout << "\n[the connection failed mid-answer; asking again]\n";
      if (!delta.reasoning.empty() && !thinking) std::cout << "(thinking) ";
      if (!delta.content.empty() && thinking) std::cout << "\n";
      if (!delta.reasoning.empty()) thinking = true;
      if (!delta.content.empty()) thinking = false;
      std::cout << delta.reasoning << delta.content << std::flush;
    };

    const ca::ChatResponse answer = model.complete(request);
    std::cout << "\n\n" << model.name() << " finished with " << ca::to_string(answer.finish_reason) << "\n";
    for (const ca::ToolCall& call : answer.message.tool_calls)
      std::cout << "  wants " << call.name << " " << call.raw_arguments
                << (call.argument_error ? "  (unusable: " + *call.argument_error + ")" : "") << "\n";
    std::cout << "  tokens: " << answer.usage.prompt_tokens << " in (" << answer.usage.cached_tokens << " cached), "
              << answer.usage.completion_tokens << " out\n";
    return answer.message.tool_calls.empty() && answer.message.content.empty() ? 1 : 0;
  } catch (const ca::LlmSpecError& error) {
    std::cerr << error.what() << "\n";
    return 2;
  } catch (const ca::LlmError& error) {
    std::cerr << "the model call failed (" << ca::to_string(error.kind()) << "): " << error.what() << "\n";
    return 1;
  }
}
