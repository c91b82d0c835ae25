// SPDX-License-Identifier: Apache-2.0
// The tools a model works with, called the way a model calls them: JSON arguments in a
// ToolCall, dispatched by the registry, answered with text (and an error flag) that goes
// back to the model. The calls below are what a model might send while starting on a
// task: look around, read the reference, create a kernel, fix it, search, try to cheat.
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;

int main() {
  // Somewhere the sandbox user (65534 when this runs as root) can enter.
  const fs::path workspace = fs::path("/tmp") / ("cuda-agent-tools-example-" + std::to_string(::getpid()));
  fs::create_directories(workspace / "kernels");
  std::ofstream(workspace / "model.py") << "import torch\n\nclass Model(torch.nn.Module):\n"
                                           "    def forward(self, a, b):\n        return a + b\n";

  cuda_agent::ToolRegistry tools;
  std::optional<cuda_agent::AnySandbox> sandbox;
  cuda_agent::SandboxOptions options;
  options.workspace = workspace;
  options.protected_paths = {"model.py"};
  try {
    cuda_agent::hand_over_to_sandbox(workspace, options);
    sandbox.emplace(cuda_agent::make_default_sandbox(options));
    tools = cuda_agent::standard_tools(*sandbox);  // Bash, Glob, Grep, Read, Edit, MultiEdit, Write
  } catch (const cuda_agent::SandboxError& error) {
    std::cout << "(no sandbox here, so no Bash: " << error.what() << ")\n";
  }
  if (tools.size() == 0) {  // the file tools need no sandbox: they run in this process, confined by path
    tools.add(cuda_agent::GlobTool()).add(cuda_agent::GrepTool()).add(cuda_agent::ReadTool());
    tools.add(cuda_agent::EditTool()).add(cuda_agent::MultiEditTool()).add(cuda_agent::WriteTool());
  }
  // One context per episode: the workspace, what must not change, what was read, the cwd.
  cuda_agent::ToolContext context(workspace, {"model.py"});

  const std::vector<std::pair<std::string, std::string>> calls = {
      {"Glob", R"json({"pattern": "**/*"})json"},
      {"Read", R"json({"file_path": "model.py"})json"},
      {"Write",
       R"json({"file_path": "kernels/add.cu", "content": "__global__ void add(const float* a, const float* b, float* out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = a[i] - b[i];\n}\n"})json"},
      {"Edit", R"json({"file_path": "kernels/add.cu", "old_string": "a[i] - b[i]", "new_string": "a[i] + b[i]"})json"},
      {"Edit",
       R"json({"file_path": "kernels/add.cu", "old_string": "     3\t  if (i < n)", "new_string": "  if (i >= n) return;"})json"},
      {"Grep", R"json({"pattern": "__global__\\s+void\\s+\\w+", "output_mode": "content"})json"},
      {"Bash", R"json({"command": "cd kernels && ls -l && wc -l add.cu", "description": "List the kernels"})json"},
      {"Bash", R"json({"command": "pwd", "timeout": 5000})json"},
      {"Write", R"json({"file_path": "model.py", "content": "class Model: pass\n"})json"},
      {"Read", R"json({"file_path": "../../etc/passwd"})json"},
      {"Read", R"json({"file_path": "kernels/add.cu", "offset": "2"})json"},
  };
  int index = 0;
  for (const auto& [tool, arguments] : calls) {
    if (!tools.contains(tool)) continue;
    const cuda_agent::ToolCall call =
        cuda_agent::ToolCall::from_raw("call_" + std::to_string(++index), tool, arguments);
    const cuda_agent::ToolResult result = tools.invoke(call, context);
    std::cout << "=== " << tool << " " << arguments.substr(0, 100) << (arguments.size() > 100 ? "..." : "")
              << (result.is_error ? "  -> error" : "") << "\n"
              << result.content << "\n\n";
  }
  const bool reference_intact = std::ifstream(workspace / "model.py").peek() == 'i';
  fs::remove_all(workspace);
  return reference_intact ? 0 : 1;
}
