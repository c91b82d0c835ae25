// SPDX-License-Identifier: Apache-2.0
// A consumer of the installed or embedded package: uses the core vocabulary, a concept,
// the process runner and an embedded resource, and the http component's clients where
// the consumer links cuda_agent::http.
#include <cuda_agent/cuda_agent.hpp>
#ifdef CONSUMER_WITH_HTTP
#include <cuda_agent/http/http.hpp>
#endif

#include <iostream>

namespace {
struct EchoClient {
  std::string_view name() const { return "echo"; }
  cuda_agent::ChatResponse complete(const cuda_agent::ChatRequest& request) {
    cuda_agent::ChatResponse response;
    response.message = cuda_agent::Message::assistant(request.messages.back().content);
    return response;
  }
};
}  // namespace

int main() {
  cuda_agent::AnyLlmClient client = EchoClient{};
  cuda_agent::ChatRequest request;
  request.messages.push_back(cuda_agent::Message::user("consumer"));
  if (client.complete(request).message.content != "consumer") return 1;

  cuda_agent::ProcessSpec spec;
  spec.argv = {"/bin/echo", "ok"};
  if (cuda_agent::run_process(spec).standard_output.text != "ok\n") return 2;

#ifdef CONSUMER_WITH_HTTP
  // Built from a spec without touching the network: the component's headers and libcurl link.
  const auto local = cuda_agent::http::make_llm_client("ollama:qwen2.5-coder:32b");
  if (local.name() != "ollama:qwen2.5-coder:32b@http://127.0.0.1:11434/v1") return 3;
  std::cout << "http component: " << local.name() << "\n";
#endif

  std::cout << "cuda_agent " << cuda_agent::version.string << " with " << cuda_agent::detail::embedded_files.size()
            << " embedded files\n";
  return 0;
}
