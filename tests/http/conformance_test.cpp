// SPDX-License-Identifier: Apache-2.0
// Conformance with OpenAI's published schemas: every request body the OpenAI-compatible
// client sends is a CreateChatCompletionRequest, and the recorded responses of every
// OpenAI-compatible dialect are CreateChatCompletionResponse / ...StreamResponse.
// Checked by Python's jsonschema against tests/data/openai_schemas.
#include "catch.hpp"

#include "llm/llm_test_support.hpp"
#include "loopback_server.hpp"

#include <cuda_agent/http/openai_client.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ca = cuda_agent;
using ca::http::OpenAiDialect;
using ca::testing::llm_fixture;
using ca::testing::LoopbackServer;
using ca::testing::Reply;

namespace {

/// The requests an agent sends over an episode, one per shape the client can produce.
std::vector<ca::ChatRequest> request_variety() {
  std::vector<ca::ChatRequest> requests;
  ca::ChatRequest base;
  base.messages = {ca::Message::system("You write CUDA kernels."), ca::Message::user("Optimize model.py.")};
  requests.push_back(base);  // no tools at all

  ca::ChatRequest tools = base;
  tools.tools = {{"Read",
                  "Reads a file.",
                  {{"type", "object"},
                   {"properties", {{"file_path", {{"type", "string"}}}, {"limit", {{"type", "integer"}}}}},
                   {"required", {"file_path"}}}},
                 {"Bash", "", {{"type", "object"}, {"properties", {{"command", {{"type", "string"}}}}}}}};
  requests.push_back(tools);

  for (const auto& choice : {ca::ToolChoice::none(), ca::ToolChoice::required(), ca::ToolChoice::named("Read")}) {
    auto chosen = tools;
    chosen.tool_choice = choice;
    chosen.parallel_tool_calls = choice.mode == ca::ToolChoice::Mode::required;
    requests.push_back(chosen);
  }

  auto history = tools;
  auto assistant =
      ca::Message::assistant("Let me look.", {ca::ToolCall::from_raw("call_1", "Read", R"({"file_path":"model.py"})"),
                                              ca::ToolCall::from_raw("call_2", "Bash", R"({"command": "nvcc)"),
                                              ca::ToolCall::from_raw("call_3", "Bash", "")});
  assistant.reasoning.text = "first look at the reference";
  history.messages.push_back(assistant);
  history.messages.push_back(ca::Message::tool_result("call_1", "Read", "class Model(nn.Module): ..."));
  history.messages.push_back(ca::Message::tool_result("call_2", "Bash", "Error: arguments are not valid JSON", true));
  history.messages.push_back(ca::Message::tool_result("call_3", "Bash", ""));
  history.messages.push_back(ca::Message::assistant("Plain text turn."));
  history.messages.push_back(ca::Message::user("Continue."));
  history.max_tokens = 4096;
  history.temperature = 0.6;
  history.top_p = 0.95;
  history.seed = 1234;
  history.stop_sequences = {"</done>", "STOP"};
  history.extra_body = {{"reasoning_effort", "medium"}, {"user", "cuda-agent-test"}};
  requests.push_back(history);
  return requests;
}

int run_validator(const std::string& arguments, std::string& output) {
  const std::string command = std::string(CUDA_AGENT_PYTHON) + " " + CUDA_AGENT_SCHEMA_VALIDATOR + " " +
                              CUDA_AGENT_OPENAI_SCHEMA + " " + arguments + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  while (const std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, got);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE(
    "Every request body the OpenAI-compatible client sends, and every recorded response, validates against OpenAI's "
    "schemas",
    "[llm][http][python]") {
  if (std::string(CUDA_AGENT_PYTHON).empty()) CUDA_AGENT_SKIP("no Python interpreter configured (CUDA_AGENT_PYTHON)");
  std::string probe;
  if (run_validator("--help", probe) != 0) CUDA_AGENT_SKIP("the Python interpreter lacks jsonschema: " + probe);

  LoopbackServer server;
  server.set_handler([](const ca::testing::RecordedRequest& request) {
    const bool stream = nlohmann::json::parse(request.body).value("stream", false);
    return stream ? Reply::events_file(llm_fixture("openai/stream_text.sse"))
                  : Reply::json_file(llm_fixture("openai/chat_text.json"));
  });
  const auto requests = request_variety();
  std::size_t sent = 0;
  for (const auto dialect : {OpenAiDialect::openai, OpenAiDialect::vllm, OpenAiDialect::sglang,
                             OpenAiDialect::llama_server, OpenAiDialect::ollama, OpenAiDialect::generic})
    for (const bool stream : {true, false}) {
      auto options = ca::http::OpenAiOptions::for_dialect(dialect);
      options.model = "test-model";
      options.base_url = server.url() + "/v1";
      options.api_key = "sk-test";
      options.stream = stream;
      options.reasoning_echo_field = dialect == OpenAiDialect::generic ? "reasoning_content" : "";
      const ca::http::OpenAiClient client(options);
      for (const auto& request : requests) {
        (void)client.complete(request);
        ++sent;
      }
    }

  const auto directory =
      std::filesystem::temp_directory_path() / ("cuda_agent_conformance_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  const auto recorded = server.requests();
  REQUIRE(recorded.size() == sent);
  for (std::size_t i = 0; i < recorded.size(); ++i)
    std::ofstream(directory / ("request_" + std::to_string(i) + ".json")) << recorded[i].body;

  std::string arguments = "--requests " + directory.string();
  for (const char* dialect : {"openai", "vllm", "sglang", "llama_server", "ollama"})
    arguments += " --responses " + llm_fixture(dialect).string();
  std::string output;
  const int status = run_validator(arguments, output);
  INFO(output);
  CHECK(status == 0);
  CHECK_CONTAINS(output, ", 0 invalid");
  std::filesystem::remove_all(directory);
}

TEST_CASE("The schema check rejects what does not conform", "[llm][http][python]") {
  if (std::string(CUDA_AGENT_PYTHON).empty()) CUDA_AGENT_SKIP("no Python interpreter configured (CUDA_AGENT_PYTHON)");
  const auto directory =
      std::filesystem::temp_directory_path() / ("cuda_agent_nonconforming_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  // A tool message without tool_call_id, and tool_choice as an unknown word.
  std::ofstream(directory / "bad.json")
      << R"({"model": "m", "messages": [{"role": "tool", "content": "x"}], "tool_choice": "sometimes"})";
  std::string output;
  CHECK(run_validator("--requests " + directory.string(), output) == 1);
  CHECK_CONTAINS(output, "INVALID");
  std::filesystem::remove_all(directory);
}
