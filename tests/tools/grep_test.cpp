// SPDX-License-Identifier: Apache-2.0
// The Grep tool: every parameter and output mode, ripgrep's output format, and its
// limits.
#include "catch.hpp"

#include <cuda_agent/tools/grep.hpp>

#include <chrono>
#include <filesystem>
#include <stop_token>
#include <string>

#include <sys/stat.h>  // mkfifo

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

struct GrepFixture {
  ca::testing::TempTree tree;
  ca::ToolContext context{tree.workspace()};
  ca::GrepTool grep;
  explicit GrepFixture(ca::GrepOptions options = {}) : grep(options) {
    tree.write("kernels/add.cu", "#include <cuda.h>\n__global__ void add(float* x) {\n  x[0] += 1;\n}\n");
    tree.write("kernels/mul.cuh", "__global__ void mul(float* x);\n");
    tree.write("model_new.py",
               "import torch\nimport cuda_extension\n\nclass ModelNew:\n    def forward(self, x):\n"
               "        return cuda_extension.add(x)\n");
    tree.write("notes.md", "TODO: add a kernel\nGlobal notes\n");
    tree.set_mtime("kernels/add.cu", 3000);
    tree.set_mtime("kernels/mul.cuh", 2000);
    tree.set_mtime("model_new.py", 1000);
    tree.set_mtime("notes.md", 4000);
  }
  ca::ToolResult run(json arguments) { return call(grep, context, arguments); }
};

}  // namespace

TEST_CASE("Grep lists matching files, newest first, by default", "[tools][grep]") {
  GrepFixture f;
  const ca::ToolResult result = f.run({{"pattern", "add"}});
  CHECK_FALSE(result.is_error);
  CHECK(result.content == "Found 3 files\n" + f.tree.path("notes.md") + "\n" + f.tree.path("kernels/add.cu") + "\n" +
                              f.tree.path("model_new.py"));
  CHECK(result.metadata["files_matched"] == 3);
  CHECK(f.run({{"pattern", "no such text"}}).content == "No files found");
}

TEST_CASE("Grep content mode prints path:line:text, with or without numbers", "[tools][grep]") {
  GrepFixture f;
  const ca::ToolResult numbered = f.run({{"pattern", "__global__"}, {"output_mode", "content"}});
  CHECK(numbered.content == f.tree.path("kernels/add.cu") + ":2:__global__ void add(float* x) {\n" +
                                f.tree.path("kernels/mul.cuh") + ":1:__global__ void mul(float* x);");
  const ca::ToolResult plain = f.run({{"pattern", "__global__"}, {"output_mode", "content"}, {"-n", false}});
  CHECK(plain.content == f.tree.path("kernels/add.cu") + ":__global__ void add(float* x) {\n" +
                             f.tree.path("kernels/mul.cuh") + ":__global__ void mul(float* x);");
  CHECK(f.run({{"pattern", "nothing"}, {"output_mode", "content"}}).content == "No matches found");
}

TEST_CASE("Grep shows context lines and separates groups", "[tools][grep]") {
  GrepFixture f;
  const std::string file = f.tree.path("model_new.py");
  const ca::ToolResult after =
      f.run({{"pattern", "^import"}, {"output_mode", "content"}, {"path", "model_new.py"}, {"-A", 1}});
  CHECK(after.content == "1:import torch\n2:import cuda_extension\n3-");
  const ca::ToolResult before =
      f.run({{"pattern", "return"}, {"output_mode", "content"}, {"path", "model_new.py"}, {"-B", 2}});
  CHECK(before.content == "4-class ModelNew:\n5-    def forward(self, x):\n6:        return cuda_extension.add(x)");
  const ca::ToolResult both =
      f.run({{"pattern", "torch|return"}, {"output_mode", "content"}, {"path", "model_new.py"}, {"-C", 1}});
  CHECK(both.content ==
        "1:import torch\n2-import cuda_extension\n--\n5-    def forward(self, x):\n"
        "6:        return cuda_extension.add(x)");
  const ca::ToolResult alias =
      f.run({{"pattern", "torch|return"}, {"output_mode", "content"}, {"path", "model_new.py"}, {"context", 1}});
  CHECK(alias.content == both.content);
  // Context only applies to content mode.
  CHECK(f.run({{"pattern", "torch"}, {"-C", 3}}).content == "Found 1 file\n" + file);
  // Across files, groups are separated too.
  const ca::ToolResult files =
      f.run({{"pattern", "__global__"}, {"output_mode", "content"}, {"-A", 1}, {"glob", "*.cu*"}});
  CHECK_THAT(files.content, Contains("add.cu-3-  x[0] += 1;\n--\n" + f.tree.path("kernels/mul.cuh") + ":1:"));
}

TEST_CASE("Grep is case-sensitive unless -i is set", "[tools][grep]") {
  GrepFixture f;
  CHECK(f.run({{"pattern", "global notes"}}).content == "No files found");
  CHECK(f.run({{"pattern", "global notes"}, {"-i", true}}).content == "Found 1 file\n" + f.tree.path("notes.md"));
}

TEST_CASE("Grep filters files by glob and type", "[tools][grep]") {
  GrepFixture f;
  CHECK(f.run({{"pattern", "add"}, {"glob", "*.cu"}}).content == "Found 1 file\n" + f.tree.path("kernels/add.cu"));
  CHECK(f.run({{"pattern", "void"}, {"glob", "*.{cu,cuh}"}}).content ==
        "Found 2 files\n" + f.tree.path("kernels/add.cu") + "\n" + f.tree.path("kernels/mul.cuh"));
  CHECK(f.run({{"pattern", "add"}, {"glob", "!*.md"}}).content ==
        "Found 2 files\n" + f.tree.path("kernels/add.cu") + "\n" + f.tree.path("model_new.py"));
  CHECK(f.run({{"pattern", "add"}, {"type", "py"}}).content == "Found 1 file\n" + f.tree.path("model_new.py"));
  CHECK(f.run({{"pattern", "void"}, {"type", "cuda"}}).content ==
        "Found 2 files\n" + f.tree.path("kernels/add.cu") + "\n" + f.tree.path("kernels/mul.cuh"));
  const ca::ToolResult unknown = f.run({{"pattern", "x"}, {"type", "cu"}});
  CHECK(unknown.is_error);
  CHECK_THAT(unknown.content,
             Contains("Unknown file type \"cu\". Known types: ") && Contains("cuda") && Contains("glob \"*.cu\""));
}

TEST_CASE("Grep count mode counts matching lines per file", "[tools][grep]") {
  GrepFixture f;
  const ca::ToolResult count = f.run({{"pattern", "x"}, {"output_mode", "count"}, {"type", "py"}});
  CHECK(count.content == f.tree.path("model_new.py") + ":3\n\nFound 3 matching lines in 1 file.");
  CHECK(f.run({{"pattern", "zzz"}, {"output_mode", "count"}}).content == "No matches found");
}

TEST_CASE("Grep pages its output with head_limit and offset", "[tools][grep]") {
  GrepFixture f;
  std::string lines;
  for (int i = 1; i <= 20; ++i) lines += "hit " + std::to_string(i) + "\n";
  f.tree.write("many.txt", lines);
  const ca::ToolResult first =
      f.run({{"pattern", "hit"}, {"output_mode", "content"}, {"path", "many.txt"}, {"head_limit", 3}});
  CHECK_THAT(first.content,
             Contains("1:hit 1\n2:hit 2\n3:hit 3\n\n[Showing results with pagination = limit: 3, offset: "
                      "0; 17 more lines not shown. Narrow the search, or call again with offset=3 for "
                      "the next page.]"));
  const ca::ToolResult second =
      f.run({{"pattern", "hit"}, {"output_mode", "content"}, {"path", "many.txt"}, {"head_limit", 2}, {"offset", 3}});
  CHECK(second.content.starts_with(
      "4:hit 4\n5:hit 5\n\n[Showing results with pagination = limit: 2, offset: 3; 15 more"));
  const ca::ToolResult unlimited =
      f.run({{"pattern", "hit"}, {"output_mode", "content"}, {"path", "many.txt"}, {"head_limit", 0}});
  CHECK_THAT(unlimited.content, Contains("20:hit 20") && !Contains("pagination"));
  const ca::ToolResult files = f.run({{"pattern", "a"}, {"head_limit", 1}});
  CHECK_THAT(files.content, Contains("more entries not shown"));
  // The default limit is 250 lines.
  std::string more;
  for (int i = 1; i <= 300; ++i) more += "x\n";
  f.tree.write("more.txt", more);
  CHECK_THAT(f.run({{"pattern", "x"}, {"output_mode", "content"}, {"path", "more.txt"}}).content,
             Contains("250:x\n\n[Showing results with pagination = limit: 250, offset: 0; 50 more lines"));
}

TEST_CASE("Grep matches across lines with multiline", "[tools][grep]") {
  GrepFixture f;
  CHECK(f.run({{"pattern", "class ModelNew:\\s+def"}}).content == "No files found");
  const ca::ToolResult spanning =
      f.run({{"pattern", "class ModelNew:\\s+def"}, {"multiline", true}, {"output_mode", "content"}});
  CHECK(spanning.content == f.tree.path("model_new.py") + ":4:class ModelNew:\n" + f.tree.path("model_new.py") +
                                ":5:    def forward(self, x):");
  CHECK_THAT(f.run({{"pattern", "torch.import"}, {"multiline", true}}).content, Contains("model_new.py"));
}

TEST_CASE("Grep searches one file or a directory given by path", "[tools][grep]") {
  GrepFixture f;
  CHECK(f.run({{"pattern", "add"}, {"path", "kernels"}}).content == "Found 1 file\n" + f.tree.path("kernels/add.cu"));
  CHECK(f.run({{"pattern", "add"}, {"path", f.tree.path("kernels/add.cu")}, {"output_mode", "content"}}).content ==
        "2:__global__ void add(float* x) {");
  const ca::ToolResult missing = f.run({{"pattern", "x"}, {"path", "nowhere"}});
  CHECK(missing.is_error);
  CHECK_THAT(missing.content, Contains("Path does not exist: " + f.tree.path("nowhere")));
}

TEST_CASE("Grep skips binary, hidden and linked files, and files over the size limit", "[tools][grep]") {
  ca::GrepOptions options;
  options.max_file_bytes = 1000;
  GrepFixture f(options);
  f.tree.write("kernels/build/add.o", std::string("add\0\0binary", 11));
  f.tree.write(".hidden/add.txt", "add\n");
  f.tree.write(".env", "add\n");
  f.tree.write("big.log", std::string(2000, 'a') + "add\n");
  std::filesystem::create_symlink(f.tree.workspace() / "kernels/add.cu", f.tree.workspace() / "alias.cu");
  const ca::ToolResult result = f.run({{"pattern", "add"}});
  CHECK_THAT(result.content, Contains("Found 3 files") && !Contains("add.o") && !Contains(".hidden") &&
                                 !Contains(".env") && !Contains("alias.cu") &&
                                 Contains("[Skipped 1 file larger than 1000 bytes, e.g. " + f.tree.path("big.log")));
  // A glob that names hidden files reaches them.
  CHECK(f.run({{"pattern", "add"}, {"glob", ".env"}}).content == "Found 1 file\n" + f.tree.path(".env"));
}

TEST_CASE("Grep cuts long lines and caps its output", "[tools][grep]") {
  ca::GrepOptions options;
  options.max_line_length = 20;
  options.max_output_bytes = 300;
  GrepFixture f(options);
  f.tree.write("long.txt", "needle " + std::string(100, 'z') + "\n");
  CHECK(f.run({{"pattern", "needle"}, {"path", "long.txt"}, {"output_mode", "content"}}).content ==
        "1:needle zzzzzzzzzzzzz [... line cut at 20 characters]");
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "needle\n";
  f.tree.write("lines.txt", lines);
  const ca::ToolResult capped = f.run({{"pattern", "needle"}, {"path", "lines.txt"}, {"output_mode", "content"}});
  CHECK(capped.content.size() < 600);
  CHECK_THAT(capped.content, Contains("(the output reached 300 bytes)"));
}

TEST_CASE("Grep explains invalid patterns and validates its arguments", "[tools][grep]") {
  GrepFixture f;
  const ca::ToolResult invalid = f.run({{"pattern", "foo("}});
  CHECK(invalid.is_error);
  CHECK_THAT(invalid.content,
             Contains("Invalid regular expression: unclosed group") && Contains("escape the special characters"));
  CHECK_THAT(f.run({{"pattern", "a\\nb"}}).content, Contains("set multiline to true"));
  CHECK_THAT(f.run({{"pattern", "x"}, {"output_mode", "lines"}}).content,
             Contains("The parameter `output_mode` must be one of \"content\", \"files_with_matches\", \"count\""));
  CHECK_THAT(f.run({{"pattern", "x"}, {"-A", -1}}).content, Contains("The parameter `-A` must be at least 0"));
  CHECK_THAT(f.run({{"pattern", "x"}, {"head_limit", "10"}}).content,
             Contains("The parameter `head_limit` must be an integer, but a string was provided"));
  CHECK_THAT(f.run({{"pattern", "x"}, {"-r", true}}).content, Contains("An unexpected parameter `-r` was provided."));
  CHECK_THAT(f.run(json::object()).content, Contains("The required parameter `pattern` is missing."));
}

TEST_CASE("Grep refuses special files and says when it stopped early", "[tools][grep]") {
  GrepFixture f;
  REQUIRE(::mkfifo(f.tree.path("pipe").c_str(), 0644) == 0);
  const ca::ToolResult fifo = f.run({{"pattern", "x"}, {"path", "pipe"}});  // must not block
  CHECK(fifo.is_error);
  CHECK(fifo.content == "Error: " + f.tree.path("pipe") + " is not a regular file or a directory.");

  ca::GrepOptions options;
  options.max_entries = 2;
  GrepFixture few(options);
  const ca::ToolResult stopped = few.run({{"pattern", "."}});
  CHECK(stopped.metadata["truncated"] == true);
  CHECK_THAT(stopped.content, Contains("[The search stopped early (more than 2 entries); results are incomplete. "
                                       "Narrow path, glob or type.]"));

  options = {};
  options.time_budget = std::chrono::milliseconds(-1);
  GrepFixture late(options);
  CHECK_THAT(late.run({{"pattern", "."}}).content, Contains("[The search stopped early (out of time"));

  GrepFixture cancelled;
  std::stop_source stop;
  stop.request_stop();
  cancelled.context.set_cancellation(stop.get_token());
  CHECK_THAT(cancelled.run({{"pattern", "."}}).content, Contains("[The search stopped early (cancelled)"));
}
