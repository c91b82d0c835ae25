// SPDX-License-Identifier: Apache-2.0
// The Edit tool: exact replacement, every failure message, creation, and the snippet.
#include "catch.hpp"

#include <cuda_agent/tools/detail/confined_fs.hpp>
#include <cuda_agent/tools/edit.hpp>
#include <cuda_agent/tools/read.hpp>

#include <string>

#include <fcntl.h>  // open

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const char* const model_new =
    "import torch\n"
    "import cuda_extension\n"
    "\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        y = x + 1\n"
    "        y = x + 1\n"
    "        return cuda_extension.run(y)\n";

struct EditFixture {
  ca::testing::TempTree tree;
  ca::ToolContext context{tree.workspace(), {"model.py"}};
  ca::ReadTool read;
  ca::EditTool edit;
  EditFixture() {
    tree.write("model_new.py", model_new);
    tree.write("model.py", "class Model: pass\n");
  }
  void read_file(const std::string& path) { REQUIRE_FALSE(call(read, context, json{{"file_path", path}}).is_error); }
  ca::ToolResult run(const json& arguments) { return call(edit, context, arguments); }
};

}  // namespace

TEST_CASE("Edit replaces a unique string and shows the changed lines", "[tools][edit]") {
  EditFixture f;
  f.read_file("model_new.py");
  const ca::ToolResult result = f.run({{"file_path", "model_new.py"},
                                       {"old_string", "import cuda_extension"},
                                       {"new_string", "import cuda_extension as ext"}});
  CHECK_FALSE(result.is_error);
  CHECK(result.content == "The file " + f.tree.path("model_new.py") +
                              " has been updated. Here's the result of running `cat -n` on a snippet of the edited "
                              "file:\n"
                              "     1\timport torch\n"
                              "     2\timport cuda_extension as ext\n"
                              "     3\t\n"
                              "     4\tclass ModelNew(torch.nn.Module):\n"
                              "     5\t    def forward(self, x):\n"
                              "     6\t        y = x + 1\n");
  CHECK_THAT(f.tree.read("model_new.py"), Contains("import cuda_extension as ext\n"));
  CHECK(result.metadata["replacements"] == 1);
  // The tool's own write counts as read: a second edit needs no new Read.
  CHECK_FALSE(
      f.run({{"file_path", "model_new.py"}, {"old_string", "as ext"}, {"new_string", "as extension"}}).is_error);
}

TEST_CASE("Edit names the lines of an ambiguous string, and replace_all replaces them all", "[tools][edit]") {
  EditFixture f;
  f.read_file("model_new.py");
  const ca::ToolResult ambiguous =
      f.run({{"file_path", "model_new.py"}, {"old_string", "y = x + 1"}, {"new_string", "y = x + 2"}});
  CHECK(ambiguous.is_error);
  CHECK_THAT(ambiguous.content, Contains("Found 2 matches of the string to replace (at lines 6 and 7 of ") &&
                                    Contains("but replace_all is false. To replace all occurrences, set replace_all "
                                             "to true.") &&
                                    Contains("String: y = x + 1"));
  CHECK(f.tree.read("model_new.py") == model_new);
  const ca::ToolResult all = f.run(
      {{"file_path", "model_new.py"}, {"old_string", "y = x + 1"}, {"new_string", "y = x + 2"}, {"replace_all", true}});
  CHECK_FALSE(all.is_error);
  CHECK_THAT(all.content, Contains("has been updated: all 2 occurrences were replaced."));
  CHECK(all.metadata["replacements"] == 2);
  CHECK_THAT(f.tree.read("model_new.py"), !Contains("x + 1"));
}

TEST_CASE("Edit says why a string was not found", "[tools][edit]") {
  EditFixture f;
  f.read_file("model_new.py");
  const ca::ToolResult missing =
      f.run({{"file_path", "model_new.py"}, {"old_string", "return y"}, {"new_string", "return x"}});
  CHECK(missing.is_error);
  CHECK_THAT(missing.content,
             Contains("Error: String to replace not found in " + f.tree.path("model_new.py") + ".\nString: return y"));
  const ca::ToolResult prefixed = f.run({{"file_path", "model_new.py"},
                                         {"old_string", "     6\t        y = x + 1\n     7\t        y = x + 1"},
                                         {"new_string", "z"}});
  CHECK_THAT(prefixed.content, Contains("line-number prefixes") && Contains("Without them it matches at line 6."));
  const ca::ToolResult indented = f.run(
      {{"file_path", "model_new.py"}, {"old_string", "def forward(self, x):\n    y = x + 1"}, {"new_string", "z"}});
  CHECK_THAT(indented.content, Contains("differs only in whitespace") && Contains("line 5"));
  CHECK(f.tree.read("model_new.py") == model_new);
}

TEST_CASE("Edit refuses no-op, unread, stale, missing, binary and protected files", "[tools][edit]") {
  EditFixture f;
  const ca::ToolResult unread = f.run({{"file_path", "model_new.py"}, {"old_string", "torch"}, {"new_string", "np"}});
  CHECK_THAT(unread.content, Contains("File has not been read yet"));

  f.read_file("model_new.py");
  CHECK_THAT(f.run({{"file_path", "model_new.py"}, {"old_string", "same"}, {"new_string", "same"}}).content,
             Contains("No changes to make: old_string and new_string are exactly the same."));

  f.tree.write("model_new.py", std::string(model_new) + "# touched\n");
  f.tree.set_mtime("model_new.py", 1'000'000);
  CHECK_THAT(f.run({{"file_path", "model_new.py"}, {"old_string", "torch"}, {"new_string", "np"}}).content,
             Contains("File has been modified since it was read"));

  const ca::ToolResult missing = f.run({{"file_path", "model_nwe.py"}, {"old_string", "a"}, {"new_string", "b"}});
  CHECK_THAT(missing.content, Contains("File does not exist: " + f.tree.path("model_nwe.py")) &&
                                  Contains("Did you mean " + f.tree.path("model_new.py")));
  CHECK_FALSE(f.tree.exists("model_nwe.py"));
  const ca::ToolResult missing_directory =
      f.run({{"file_path", "nope/x.py"}, {"old_string", "a"}, {"new_string", "b"}});
  CHECK_THAT(missing_directory.content, Contains("File does not exist"));
  CHECK_FALSE(f.tree.exists("nope"));

  f.tree.write("blob.bin", std::string("a\0b", 3));
  f.read_file("model.py");
  CHECK_THAT(f.run({{"file_path", "model.py"}, {"old_string", "pass"}, {"new_string", "..."}}).content,
             Contains("is protected"));
  CHECK(f.tree.read("model.py") == "class Model: pass\n");

  // Read refuses binary files, so Edit meets an unread one; once the rule is met it still refuses.
  ca::ToolContext& context = f.context;
  struct stat status {};
  ::stat(f.tree.path("blob.bin").c_str(), &status);
  context.record_read(f.tree.path("blob.bin"), cuda_agent::detail::modification_time(status));
  CHECK_THAT(f.run({{"file_path", "blob.bin"}, {"old_string", "a"}, {"new_string", "c"}}).content,
             Contains("looks like a binary file; only text files can be edited"));
}

TEST_CASE("Edit with an empty old_string creates a file, or fills an empty one", "[tools][edit]") {
  EditFixture f;
  const ca::ToolResult created =
      f.run({{"file_path", "kernels/new.cu"}, {"old_string", ""}, {"new_string", "// new\n"}});
  CHECK_FALSE(created.is_error);
  CHECK(created.content == "File created successfully at: " + f.tree.path("kernels/new.cu"));
  CHECK(f.tree.read("kernels/new.cu") == "// new\n");

  f.read_file("model_new.py");
  CHECK_THAT(f.run({{"file_path", "model_new.py"}, {"old_string", ""}, {"new_string", "x"}}).content,
             Contains("Cannot create new file - file already exists"));

  f.tree.write("empty.py", "");
  f.read_file("empty.py");
  CHECK_FALSE(f.run({{"file_path", "empty.py"}, {"old_string", ""}, {"new_string", "filled\n"}}).is_error);
  CHECK(f.tree.read("empty.py") == "filled\n");
}

TEST_CASE("Edit with an empty new_string deletes the text", "[tools][edit]") {
  EditFixture f;
  f.read_file("model_new.py");
  CHECK_FALSE(
      f.run({{"file_path", "model_new.py"}, {"old_string", "import cuda_extension\n"}, {"new_string", ""}}).is_error);
  CHECK_THAT(f.tree.read("model_new.py"), !Contains("import cuda_extension\n") && Contains("import torch\n\nclass"));
}

TEST_CASE("Edit validates its arguments", "[tools][edit]") {
  EditFixture f;
  CHECK_THAT(f.run({{"file_path", "model_new.py"}, {"old_string", "a"}}).content,
             Contains("The required parameter `new_string` is missing."));
  CHECK_THAT(
      f.run({{"file_path", "model_new.py"}, {"old_string", "a"}, {"new_string", "b"}, {"replace_all", "yes"}}).content,
      Contains("The parameter `replace_all` must be a boolean, but a string was provided"));
  CHECK_THAT(f.run({{"file_path", "model_new.py"}, {"old_str", "a"}, {"new_string", "b"}}).content,
             Contains("An unexpected parameter `old_str` was provided.") &&
                 Contains("The required parameter `old_string` is missing."));
}

TEST_CASE("Edit refuses files larger than it handles, and files that grow while read", "[tools][edit]") {
  EditFixture f;
  ca::EditOptions options;
  options.max_file_bytes = 100;
  ca::EditTool small(options);
  f.tree.write("big.py", std::string(200, '#') + "\n");
  f.read_file("big.py");
  const ca::ToolResult refused = call(
      small, f.context, json{{"file_path", "big.py"}, {"old_string", "#"}, {"new_string", "x"}, {"replace_all", true}});
  CHECK(refused.is_error);
  CHECK(refused.content ==
        "Error: " + f.tree.path("big.py") + " is 201 bytes, more than the 100 bytes this tool handles.");
  CHECK(f.tree.read("big.py") == std::string(200, '#') + "\n");

  // A file whose size says nothing of its content (like those in /proc) is still capped.
  const ca::detail::UniqueFd status(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  REQUIRE(status);
  CHECK_THROWS_WITH(ca::detail::read_all(status.get(), 16, "/proc/self/status"),
                    "/proc/self/status grew past the 16 bytes this tool handles while it was read.");
}
