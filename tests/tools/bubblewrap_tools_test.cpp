// SPDX-License-Identifier: Apache-2.0
// The standard tools on a workspace served by BubblewrapSandbox: Bash runs confined as
// the sandbox user, the working directory persists, and files the file tools write
// (as root on the host) stay writable for commands in the sandbox, and the other way
// round. (Bash itself is tested through both sandboxes in bash_test.cpp.)
#include "catch.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/sandbox_options.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <filesystem>
#include <optional>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using Catch::Matchers::Contains;

namespace {

/// A workspace handed over to the sandbox user, with a protected reference file.
struct ConfinedWorkspace {
  ca::testing::TempTree tree;
  std::optional<ca::BubblewrapSandbox> sandbox;
  std::string unavailable;
  ConfinedWorkspace() {
    tree.write("model.py", "class Model: pass\n");
    tree.write("kernels/add.cu", "// add\n");
    try {
      sandbox.emplace(ca::testing::sandbox_options_for(tree, {"model.py"}));
      sandbox->check();
    } catch (const ca::SandboxError& error) {
      unavailable = error.what();
      sandbox.reset();
    }
  }
};

ca::ToolResult invoke(ca::ToolRegistry& registry, ca::ToolContext& context, const std::string& tool,
                      const nlohmann::json& arguments) {
  return registry.invoke(ca::ToolCall::from_object("id", tool, arguments), context);
}

}  // namespace

TEST_CASE("Bash runs confined through BubblewrapSandbox and keeps its working directory", "[tools][bubblewrap]") {
  ConfinedWorkspace w;
  if (!w.sandbox) CUDA_AGENT_SKIP("bubblewrap cannot run here: " + w.unavailable);
  ca::ToolRegistry tools = ca::standard_tools(*w.sandbox);
  ca::ToolContext context(w.tree.workspace(), {"model.py"});

  const ca::ToolResult hello = invoke(tools, context, "Bash", {{"command", "echo hello; id -u"}});
  CHECK_FALSE(hello.is_error);
  CHECK(hello.metadata["confined"] == true);
  CHECK(hello.metadata["sandbox"] == "bubblewrap");
  CHECK_THAT(hello.content, Contains("hello"));
  if (::geteuid() == 0) CHECK_THAT(hello.content, Contains("65534"));

  REQUIRE_FALSE(invoke(tools, context, "Bash", {{"command", "cd kernels"}}).is_error);
  CHECK(invoke(tools, context, "Bash", {{"command", "pwd"}}).content == w.tree.path("kernels"));
  CHECK(invoke(tools, context, "Bash", {{"command", "echo $PAGER"}}).content == "cat");

  const ca::ToolResult slow = invoke(tools, context, "Bash", {{"command", "sleep 30"}, {"timeout", 500}});
  CHECK(slow.is_error);
  CHECK_THAT(slow.content, Contains("Command timed out after 500 ms"));

  const ca::ToolResult protected_write = invoke(tools, context, "Bash", {{"command", "echo x > ../model.py"}});
  CHECK(protected_write.is_error);
  CHECK(w.tree.read("model.py") == "class Model: pass\n");
}

TEST_CASE("files written by the tools stay writable in the sandbox, and the other way round", "[tools][bubblewrap]") {
  ConfinedWorkspace w;
  if (!w.sandbox) CUDA_AGENT_SKIP("bubblewrap cannot run here: " + w.unavailable);
  ca::ToolRegistry tools = ca::standard_tools(*w.sandbox);
  ca::ToolContext context(w.tree.workspace(), {"model.py"});

  // Created by the host process (root in CI), then changed by the sandbox user.
  REQUIRE_FALSE(
      invoke(tools, context, "Write", {{"file_path", "kernels/new/mul.cu"}, {"content", "// mul\n"}}).is_error);
  const ca::ToolResult append = invoke(
      tools, context, "Bash", {{"command", "echo '// more' >> kernels/new/mul.cu && touch kernels/new/other.cu"}});
  CHECK_FALSE(append.is_error);
  CHECK(w.tree.read("kernels/new/mul.cu") == "// mul\n// more\n");

  // Created in the sandbox, then edited by the tools: the owner stays the sandbox user.
  REQUIRE_FALSE(invoke(tools, context, "Bash", {{"command", "printf 'a = 1\\n' > kernels/gen.py"}}).is_error);
  REQUIRE_FALSE(invoke(tools, context, "Read", {{"file_path", "kernels/gen.py"}}).is_error);
  REQUIRE_FALSE(invoke(tools, context, "Edit",
                       {{"file_path", "kernels/gen.py"}, {"old_string", "a = 1"}, {"new_string", "a = 2"}})
                    .is_error);
  struct stat status {};
  REQUIRE(::stat(w.tree.path("kernels/gen.py").c_str(), &status) == 0);
  struct stat workspace_status {};
  REQUIRE(::stat(w.tree.workspace().c_str(), &workspace_status) == 0);
  CHECK(status.st_uid == workspace_status.st_uid);
  CHECK(invoke(tools, context, "Bash", {{"command", "echo 'b = 3' >> kernels/gen.py && cat kernels/gen.py"}}).content ==
        "a = 2\nb = 3");

  // The file tools refuse the protected file, as the sandbox does.
  REQUIRE_FALSE(invoke(tools, context, "Read", {{"file_path", "model.py"}}).is_error);
  CHECK_THAT(invoke(tools, context, "Write", {{"file_path", "model.py"}, {"content", "x"}}).content,
             Contains("is protected"));
}
