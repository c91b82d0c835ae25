// SPDX-License-Identifier: Apache-2.0
// The standard registry: which tools, in which order, specs a model can use, and
// dispatch that answers every mistake with a tool error.
#include "catch.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <regex>
#include <string>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using Catch::Matchers::Contains;

static_assert(ca::Tool<ca::BashTool<ca::AnySandbox>>);
static_assert(ca::Tool<ca::BashTool<ca::ProcessSandbox>> && ca::Tool<ca::BashTool<ca::BubblewrapSandbox>>);
static_assert(ca::Tool<ca::ReadTool> && ca::Tool<ca::WriteTool> && ca::Tool<ca::EditTool> &&
              ca::Tool<ca::MultiEditTool> && ca::Tool<ca::GrepTool> && ca::Tool<ca::GlobTool>);

TEST_CASE("the standard registry offers the seven tools in a fixed order", "[tools][registry]") {
  ca::testing::RecordingSandbox sandbox;
  const ca::ToolRegistry registry = ca::standard_tools(sandbox);
  const std::vector<ca::ToolSpec> specs = registry.specs();
  std::vector<std::string> names;
  for (const ca::ToolSpec& spec : specs) names.push_back(spec.name);
  CHECK(names == std::vector<std::string>{"Bash", "Glob", "Grep", "Read", "Edit", "MultiEdit", "Write"});

  ca::StandardToolOptions options;
  options.include_multi_edit = false;
  CHECK_FALSE(ca::standard_tools(sandbox, options).contains("MultiEdit"));
}

TEST_CASE("every tool spec is well formed for OpenAI and Anthropic", "[tools][registry]") {
  ca::testing::RecordingSandbox sandbox;
  const std::regex valid_name("^[a-zA-Z0-9_-]{1,64}$");
  for (const ca::ToolSpec& spec : ca::standard_tools(sandbox).specs()) {
    INFO(spec.name);
    CHECK(std::regex_match(spec.name, valid_name));
    CHECK(spec.description.size() > 200);
    CHECK(spec.parameters["type"] == "object");
    CHECK(spec.parameters["additionalProperties"] == false);
    CHECK(spec.parameters.contains("required"));
    // Every keyword used is one the argument validator implements.
    CHECK(ca::detail::unsupported_schema_keywords(spec.parameters).empty());
    for (const auto& [property, schema] : spec.parameters["properties"].items()) {
      INFO(property);
      CHECK(schema.contains("description"));
      CHECK(schema.contains("type"));
    }
  }
}

TEST_CASE("the registry dispatches to the tools and answers mistakes with errors", "[tools][registry]") {
  ca::testing::TempTree tree;
  tree.write("a.txt", "alpha\n");
  ca::AnySandbox sandbox = ca::ProcessSandbox(ca::testing::sandbox_options_for(tree));
  ca::ToolRegistry registry = ca::standard_tools(sandbox);
  ca::ToolContext context(tree.workspace());

  const ca::ToolResult read =
      registry.invoke(ca::ToolCall::from_raw("1", "Read", R"({"file_path": "a.txt"})"), context);
  CHECK(read.content == "     1\talpha\n");
  const ca::ToolResult bash =
      registry.invoke(ca::ToolCall::from_raw("2", "Bash", R"({"command": "cat a.txt"})"), context);
  CHECK(bash.content == "alpha");
  const ca::ToolResult edit = registry.invoke(
      ca::ToolCall::from_raw("3", "Edit", R"({"file_path": "a.txt", "old_string": "alpha", "new_string": "beta"})"),
      context);
  CHECK_FALSE(edit.is_error);
  CHECK(tree.read("a.txt") == "beta\n");

  const ca::ToolResult unknown = registry.invoke(ca::ToolCall::from_raw("4", "str_replace_editor", "{}"), context);
  CHECK(unknown.is_error);
  CHECK_THAT(unknown.content, Contains("no tool named 'str_replace_editor'") && Contains("Bash, Glob, Grep, Read"));
  const ca::ToolResult malformed = registry.invoke(ca::ToolCall::from_raw("5", "Read", R"({"file_path": )"), context);
  CHECK(malformed.is_error);
  CHECK_THAT(malformed.content, Contains("could not be used"));
  const ca::ToolResult invalid = registry.invoke(ca::ToolCall::from_raw("6", "Grep", R"({"pattern": 3})"), context);
  CHECK(invalid.is_error);
  CHECK_THAT(invalid.content,
             Contains("Error: invalid arguments for Grep:\n- The parameter `pattern` must be a string"));
}

TEST_CASE("one registry serves successive episodes with their own contexts", "[tools][registry]") {
  ca::testing::TempTree first;
  ca::testing::TempTree second;
  first.write("x.txt", "first\n");
  second.write("x.txt", "second\n");
  ca::testing::RecordingSandbox sandbox;
  ca::ToolRegistry registry = ca::standard_tools(sandbox);
  ca::ToolContext one(first.workspace());
  ca::ToolContext two(second.workspace());
  CHECK(registry.invoke(ca::ToolCall::from_raw("1", "Read", R"({"file_path": "x.txt"})"), one).content ==
        "     1\tfirst\n");
  CHECK(registry.invoke(ca::ToolCall::from_raw("2", "Read", R"({"file_path": "x.txt"})"), two).content ==
        "     1\tsecond\n");
  // Reading in one episode does not allow writing in the other.
  CHECK(registry.invoke(ca::ToolCall::from_raw("3", "Write", R"({"file_path": "x.txt", "content": "y"})"), two)
            .is_error == false);
  ca::ToolContext fresh(first.workspace());
  CHECK_THAT(
      registry.invoke(ca::ToolCall::from_raw("4", "Write", R"({"file_path": "x.txt", "content": "y"})"), fresh).content,
      Contains("File has not been read yet"));
}
