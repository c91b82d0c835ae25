// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include "verify/verify_support.hpp"

#include <cuda_agent/verify/verify_tool.hpp>

#include <memory>
#include <string>

namespace ca = cuda_agent;
namespace fs = std::filesystem;

TEST_CASE("the Verify tool builds the workspace, verifies it and tells the model what to fix", "[python][verifier]") {
  ca::testing::ScratchDirectory scratch("verify-tool");
  auto driver = ca::testing::test_compiler("cpu", scratch.path());
  auto verifier = std::make_shared<ca::HarnessVerifier>(ca::testing::harness_options("cpu"));
  const ca::Task task = ca::testing::adversarial_task("cpu", "relu");
  ca::VerifyToolOptions options;
  options.build_directory = scratch.path() / "build";
  ca::detail::make_open_directory(options.build_directory);
  ca::VerifyTool<ca::ProcessSandbox> tool(driver, verifier, task, options);
  static_assert(ca::Tool<ca::VerifyTool<ca::ProcessSandbox>>);
  CHECK(tool.name() == "Verify");
  CHECK(tool.parameters()["type"] == "object");

  const fs::path workspace = scratch.path() / "workspace";
  const std::string good = R"(import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        print("forward called")
        return cuda_extension.relu(x)
)";
  ca::testing::assemble_candidate(workspace, good, "cpu");
  ca::ToolContext context(workspace);

  const ca::ToolResult correct = tool.invoke(nlohmann::json::object(), context);
  INFO(correct.content);
  CHECK_FALSE(correct.is_error);
  // The plan makes 15 or 16 calls (two per set, the five requested, the audit's second sparse
  // set and the near repeat of the first, and one or two more), every one checked.
  CHECK_THAT(correct.content, Catch::Matchers::Contains("CORRECT: 1"));
  CHECK((correct.content.find("15 of 15 checks passed (7 input sets") != std::string::npos ||
         correct.content.find("16 of 16 checks passed (7 input sets") != std::string::npos));
  CHECK_THAT(correct.content, Catch::Matchers::Contains("forward called"));
  CHECK(correct.metadata["correct"] == true);

  std::string wrong = good;
  wrong.replace(wrong.find("cuda_extension.relu(x)"), 22, "cuda_extension.relu_skip_last(x)");
  ca::testing::write_text(workspace / "model_new.py", wrong);
  const ca::ToolResult rejected = tool.invoke(nlohmann::json::object(), context);
  INFO(rejected.content);
  CHECK(rejected.is_error);
  CHECK_THAT(rejected.content, Catch::Matchers::Contains("REJECTED ("));
  CHECK_THAT(rejected.content, Catch::Matchers::Contains("(15, 1023)"));
  CHECK(rejected.metadata["correct"] == false);

  ca::testing::write_text(workspace / "kernels" / "broken.cpp", "this is not C++;\n");
  const ca::ToolResult unbuilt = tool.invoke(nlohmann::json::object(), context);
  INFO(unbuilt.content);
  CHECK(unbuilt.is_error);
  CHECK_THAT(unbuilt.content, Catch::Matchers::Contains("the build failed"));
  CHECK_THAT(unbuilt.content, Catch::Matchers::Contains("kernels/broken.cpp:1"));
  CHECK(unbuilt.metadata["stage"] == "compile");
}
