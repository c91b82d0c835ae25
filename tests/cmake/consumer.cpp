// SPDX-License-Identifier: Apache-2.0
// A consumer of the installed or embedded package: uses the core vocabulary, a concept,
// the process runner and an embedded resource.
#include <cuda_agent/cuda_agent.hpp>

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

  std::cout << "cuda_agent " << cuda_agent::version.string << " with " << cuda_agent::detail::embedded_files.size()
            << " embedded files\n";
  return 0;
}
