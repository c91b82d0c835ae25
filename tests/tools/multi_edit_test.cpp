// SPDX-License-Identifier: Apache-2.0
// The MultiEdit tool: ordered edits, all or none, creation, and per-edit messages.
#include "catch.hpp"

#include <cuda_agent/tools/multi_edit.hpp>
#include <cuda_agent/tools/read.hpp>

#include <string>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

struct MultiEditFixture {
  ca::testing::TempTree tree;
  ca::ToolContext context{tree.workspace(), {"model.py"}};
  ca::ReadTool read;
  ca::MultiEditTool multi_edit;
  MultiEditFixture() { tree.write("k.cu", "int a = 1;\nint b = 2;\nint c = 3;\n"); }
  void read_file(const std::string& path) { REQUIRE_FALSE(call(read, context, json{{"file_path", path}}).is_error); }
  ca::ToolResult run(const json& edits, const std::string& path = "k.cu") {
    return call(multi_edit, context, json{{"file_path", path}, {"edits", edits}});
  }
};

json edit(const std::string& old_string, const std::string& new_string, bool replace_all = false) {
  json e = {{"old_string", old_string}, {"new_string", new_string}};
  if (replace_all) e["replace_all"] = true;
  return e;
}

}  // namespace

TEST_CASE("MultiEdit applies edits in order, each to the previous result", "[tools][multi_edit]") {
  MultiEditFixture f;
  f.read_file("k.cu");
  const ca::ToolResult result =
      f.run(json::array({edit("int a = 1;", "int a = 10;"), edit("a = 10", "alpha = 10"), edit("int", "long", true)}));
  CHECK_FALSE(result.is_error);
  CHECK(f.tree.read("k.cu") == "long alpha = 10;\nlong b = 2;\nlong c = 3;\n");
  CHECK_THAT(result.content, Contains("Applied 3 edits to " + f.tree.path("k.cu") +
                                      ":\n"
                                      "1. Replaced \"int a = 1;\" with \"int a = 10;\"\n"
                                      "2. Replaced \"a = 10\" with \"alpha = 10\"\n"
                                      "3. Replaced \"int\" with \"long\" (3 occurrences)\n") &&
                                 Contains("     1\tlong alpha = 10;\n     2\tlong b = 2;\n     3\tlong c = 3;\n"));
  CHECK(result.metadata["edits"] == 3);
  CHECK(result.metadata["replacements"] == 5);
}

TEST_CASE("MultiEdit applies nothing when one edit fails", "[tools][multi_edit]") {
  MultiEditFixture f;
  f.read_file("k.cu");
  const std::string before = f.tree.read("k.cu");
  const ca::ToolResult missing =
      f.run(json::array({edit("int a = 1;", "int a = 10;"), edit("int d = 4;", "int d = 5;")}));
  CHECK(missing.is_error);
  CHECK_THAT(missing.content, Contains("Edit 2 of 2 failed: String to replace not found") &&
                                  Contains("No edits were applied: MultiEdit applies all edits or none."));
  CHECK(f.tree.read("k.cu") == before);

  const ca::ToolResult ambiguous = f.run(json::array({edit("int", "long"), edit("b", "beta")}));
  CHECK_THAT(ambiguous.content, Contains("Edit 1 of 2 failed: Found 3 matches") && Contains("lines 1, 2 and 3"));
  // Edits see earlier results: the second no longer finds what the first replaced.
  const ca::ToolResult sequenced =
      f.run(json::array({edit("int a = 1;", "int x = 1;"), edit("int a = 1;", "int y = 1;")}));
  CHECK_THAT(sequenced.content, Contains("Edit 2 of 2 failed: String to replace not found"));
  CHECK(f.tree.read("k.cu") == before);

  CHECK_THAT(f.run(json::array({edit("a", "b"), edit("c", "c")})).content,
             Contains("Edit 2 of 2 failed: No changes to make: old_string and new_string are exactly the same."));
  CHECK_THAT(f.run(json::array({edit("a", "b"), edit("", "c")})).content,
             Contains("Edit 2 of 2 failed: old_string is empty. Only the first edit may have an empty old_string"));
  CHECK(f.tree.read("k.cu") == before);
}

TEST_CASE("MultiEdit creates a file from an empty first old_string", "[tools][multi_edit]") {
  MultiEditFixture f;
  const ca::ToolResult created =
      f.run(json::array({edit("", "template\nvalue = X\n"), edit("X", "42")}), "kernels/gen.py");
  CHECK_FALSE(created.is_error);
  CHECK(created.content == "File created successfully at: " + f.tree.path("kernels/gen.py"));
  CHECK(f.tree.read("kernels/gen.py") == "template\nvalue = 42\n");
  f.read_file("k.cu");
  CHECK_THAT(f.run(json::array({edit("", "x")})).content,
             Contains("Edit 1 of 1 failed: Cannot create new file - file already exists"));

  // An existing empty file is filled the same way, and the summary says so.
  f.tree.write("empty.py", "");
  f.read_file("empty.py");
  const ca::ToolResult filled = f.run(json::array({edit("", "value = X\n"), edit("X", "7")}), "empty.py");
  CHECK_FALSE(filled.is_error);
  CHECK_THAT(filled.content, Contains("Applied 2 edits to " + f.tree.path("empty.py") +
                                      ":\n1. Created the file with "
                                      "\"value = X"));
  CHECK(f.tree.read("empty.py") == "value = 7\n");
}

TEST_CASE("MultiEdit follows the read-before-write rule and protected paths", "[tools][multi_edit]") {
  MultiEditFixture f;
  CHECK_THAT(f.run(json::array({edit("int a", "int z")})).content, Contains("File has not been read yet"));
  f.tree.write("model.py", "x = 1\n");
  f.read_file("model.py");
  CHECK_THAT(f.run(json::array({edit("x = 1", "x = 2")}), "model.py").content, Contains("is protected"));
  CHECK(f.tree.read("model.py") == "x = 1\n");
  CHECK_THAT(f.run(json::array({edit("a", "b")}), "missing.cu").content, Contains("File does not exist"));
}

TEST_CASE("MultiEdit validates every edit", "[tools][multi_edit]") {
  MultiEditFixture f;
  CHECK_THAT(f.run(json::array()).content,
             Contains("The parameter `edits` must contain at least 1 item, but it has 0."));
  CHECK_THAT(f.run({{{"old_string", "a"}}}).content,
             Contains("The required parameter `edits[0].new_string` is missing."));
  CHECK_THAT(f.run({edit("a", "b"), {{"old_string", "a"}, {"new_string", "b"}, {"all", true}}}).content,
             Contains("An unexpected parameter `edits[1].all` was provided."));
  CHECK_THAT(f.run({edit("a", "b"), {{"old_string", 1}, {"new_string", "b"}}}).content,
             Contains("The parameter `edits[1].old_string` must be a string"));
  CHECK_THAT(call(f.multi_edit, f.context, json{{"file_path", "k.cu"}, {"edits", "a->b"}}).content,
             Contains("The parameter `edits` must be an array, but a string was provided"));
}
