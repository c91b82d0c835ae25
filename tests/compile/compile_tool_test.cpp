// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/compile/compile_tool.hpp>

#include <filesystem>  // exists
#include <memory>      // make_shared
#include <string>      // string

#include "compile_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::RecordingSandbox;

TEST_CASE("the Compile tool builds the workspace and reports located errors", "[python]") {
  ca::testing::ScratchDirectory scratch("compile-tool");
  const std::filesystem::path workspace = scratch / "workspace";
  ca::testing::write_files(workspace, ca::testing::plain_candidate(ca::testing::fresh_token()));
  auto driver = std::make_shared<ca::CompileDriver<RecordingSandbox>>(RecordingSandbox{}, ca::testing::cpu_options());
  ca::CompileToolOptions options;
  options.build_directory = scratch / "build";
  ca::CompileTool tool(driver, options);
  static_assert(ca::Tool<decltype(tool)>);
  ca::ToolRegistry registry;
  registry.add(std::move(tool));
  ca::ToolContext context(workspace);

  ca::ToolCall call;
  call.id = "call-1";
  call.name = "Compile";
  const ca::ToolResult built = registry.invoke(call, context);
  INFO(built.content);
  CHECK_FALSE(built.is_error);
  CHECK(built.content.rfind("Build succeeded in ", 0) == 0);
  CHECK(built.content.find("Module: build/cuda_extension") != std::string::npos);
  CHECK(built.metadata["succeeded"] == true);
  CHECK(std::filesystem::exists(workspace / "build" / ("cuda_extension" + driver->toolchain().extension_suffix)));

  ca::testing::write_files(
      workspace, {{"kernels/ops.cpp", "#include \"ops.h\"\nlong ops_add(long value) {\n  return value + nope;\n}\n"}});
  call.id = "call-2";
  call.arguments = {{"log", true}};
  const ca::ToolResult failed = registry.invoke(call, context);
  INFO(failed.content);
  CHECK(failed.is_error);
  CHECK(failed.content.rfind("Build failed in ", 0) == 0);
  CHECK(failed.content.find("kernels/ops.cpp:3:18: error: 'nope' was not declared in this scope") != std::string::npos);
  CHECK(failed.content.find("Compiler output") != std::string::npos);
  CHECK(failed.metadata.contains("diagnostics"));
}
