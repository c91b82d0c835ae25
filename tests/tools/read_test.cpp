// SPDX-License-Identifier: Apache-2.0
// The Read tool: every parameter, every message, and the read record Write/Edit rely on.
#include "catch.hpp"

#include <cuda_agent/tools/read.hpp>

#include <string>

#include <sys/stat.h>  // mkfifo

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;

TEST_CASE("Read returns numbered lines and records the read", "[tools][read]") {
  ca::testing::TempTree tree;
  tree.write("kernels/add.cu", "__global__ void add() {}\nint x;\n");
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;

  const ca::ToolResult relative = call(read, context, R"({"file_path": "kernels/add.cu"})");
  CHECK_FALSE(relative.is_error);
  CHECK(relative.content == "     1\t__global__ void add() {}\n     2\tint x;\n");
  CHECK(relative.metadata["last_line"] == 2);
  CHECK(context.read_time(tree.path("kernels/add.cu")) != nullptr);

  const ca::ToolResult absolute = call(read, context, nlohmann::json{{"file_path", tree.path("kernels/add.cu")}});
  CHECK(absolute.content == relative.content);
  const ca::ToolResult dotted = call(read, context, R"({"file_path": "./kernels/../kernels/add.cu"})");
  CHECK(dotted.content == relative.content);
}

TEST_CASE("Read pages with offset and limit", "[tools][read]") {
  ca::testing::TempTree tree;
  tree.write("f.txt", "one\ntwo\nthree\nfour\nfive");
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;

  const ca::ToolResult page = call(read, context, R"({"file_path": "f.txt", "offset": 2, "limit": 2})");
  CHECK(page.content ==
        "     2\ttwo\n     3\tthree\n\n[Showing lines 2-3 of 5. Call Read with offset=4 to continue.]\n");
  CHECK(page.metadata["total_lines"] == 5);

  const ca::ToolResult from_zero = call(read, context, R"({"file_path": "f.txt", "offset": 0, "limit": 1})");
  CHECK_THAT(from_zero.content, Contains("     1\tone\n") && Contains("Call Read with offset=2"));

  const ca::ToolResult huge =
      call(read, context, R"({"file_path": "f.txt", "offset": 4, "limit": 9223372036854775807})");
  CHECK(huge.content == "     4\tfour\n     5\tfive\n");
  const ca::ToolResult last = call(read, context, R"({"file_path": "f.txt", "offset": 5})");
  CHECK(last.content == "     5\tfive\n");

  const ca::ToolResult beyond = call(read, context, R"({"file_path": "f.txt", "offset": 9})");
  CHECK(beyond.is_error);
  CHECK_THAT(beyond.content, Contains("is shorter than the provided offset (9): it has 5 lines. Use an offset between "
                                      "1 and 5."));
}

TEST_CASE("Read returns the default number of lines and says how to go on", "[tools][read]") {
  ca::testing::TempTree tree;
  std::string text;
  for (int i = 1; i <= 10; ++i) text += "line " + std::to_string(i) + "\n";
  tree.write("f.txt", text);
  ca::ToolContext context(tree.workspace());
  ca::ReadOptions options;
  options.default_line_limit = 4;
  ca::ReadTool read(options);
  const ca::ToolResult result = call(read, context, R"({"file_path": "f.txt"})");
  CHECK_THAT(result.content, Contains("     4\tline 4\n") && !Contains("line 5") &&
                                 Contains("[Showing lines 1-4 of 10. Call Read with offset=5 to continue.]"));
  CHECK_THAT(std::string(read.description()), Contains("up to 4 lines"));
}

TEST_CASE("Read cuts long lines and says which", "[tools][read]") {
  ca::testing::TempTree tree;
  tree.write("f.txt", "short\n" + std::string(50, 'x') + "\n" + std::string(20, 'y'));
  ca::ToolContext context(tree.workspace());
  ca::ReadOptions options;
  options.max_line_length = 10;
  ca::ReadTool read(options);
  const ca::ToolResult result = call(read, context, R"({"file_path": "f.txt"})");
  CHECK_THAT(result.content, Contains("     2\txxxxxxxxxx\n") && Contains("     3\tyyyyyyyyyy\n") &&
                                 Contains("[Lines 2 and 3 were longer than 10 characters and were cut.") &&
                                 Contains("sed -n '2p'"));
  // Characters, not bytes: ten two-byte characters fit in a limit of ten.
  std::string accents;
  for (int i = 0; i < 10; ++i) accents += "\xC3\xA9";
  tree.write("e.txt", accents);
  CHECK_THAT(call(read, context, R"({"file_path": "e.txt"})").content, !Contains("cut"));
}

TEST_CASE("Read stops before its output grows past the cap", "[tools][read]") {
  ca::testing::TempTree tree;
  std::string text;
  for (int i = 0; i < 100; ++i) text += std::string(40, 'a') + "\n";
  tree.write("f.txt", text);
  ca::ToolContext context(tree.workspace());
  ca::ReadOptions options;
  options.max_output_bytes = 500;
  ca::ReadTool read(options);
  const ca::ToolResult result = call(read, context, R"({"file_path": "f.txt"})");
  CHECK(result.content.size() < 700);
  CHECK_THAT(result.content,
             Contains("output stopped at 500 bytes") && Contains("of 100") && Contains("Call Read with offset="));
}

TEST_CASE("Read explains empty, missing, directory, binary and special files", "[tools][read]") {
  ca::testing::TempTree tree;
  tree.write("empty.txt", "");
  tree.write("kernels/gemm.cu", "x\n");
  tree.write("lib.so", std::string("\x7f"
                                   "ELF\0\0\0",
                                   7) +
                           "binary");
  ::mkfifo(tree.path("pipe").c_str(), 0644);
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;

  const ca::ToolResult empty = call(read, context, R"({"file_path": "empty.txt"})");
  CHECK_FALSE(empty.is_error);
  CHECK_THAT(empty.content, Contains("exists but its contents are empty"));
  CHECK(context.read_time(tree.path("empty.txt")) != nullptr);

  const ca::ToolResult missing = call(read, context, R"({"file_path": "kernels/gem.cu"})");
  CHECK(missing.is_error);
  CHECK_THAT(missing.content, Contains("Error: File does not exist: " + tree.path("kernels/gem.cu")) &&
                                  Contains("Did you mean " + tree.path("kernels/gemm.cu") + "?") &&
                                  Contains("Relative paths are resolved against the workspace"));
  const ca::ToolResult case_typo = call(read, context, R"({"file_path": "kernels/GEMM.cu"})");
  CHECK_THAT(case_typo.content, Contains("Did you mean " + tree.path("kernels/gemm.cu")));

  const ca::ToolResult no_directory = call(read, context, R"({"file_path": "nope/x.py"})");
  CHECK_THAT(no_directory.content, Contains("Its directory " + tree.path("nope") + " does not exist either."));

  const ca::ToolResult directory = call(read, context, R"({"file_path": "kernels"})");
  CHECK(directory.is_error);
  CHECK_THAT(directory.content, Contains("is a directory, not a file") && Contains("Glob"));

  const ca::ToolResult binary = call(read, context, R"({"file_path": "lib.so"})");
  CHECK(binary.is_error);
  CHECK_THAT(binary.content, Contains("looks like a binary file") && Contains("xxd"));

  const ca::ToolResult fifo = call(read, context, R"({"file_path": "pipe"})");  // must not block
  CHECK(fifo.is_error);
  CHECK_THAT(fifo.content, Contains("is not a regular file (it is a named pipe)"));
}

TEST_CASE("Read refuses to return a huge file whole, and reads it in parts", "[tools][read]") {
  ca::testing::TempTree tree;
  std::string text;
  for (int i = 1; i <= 3000; ++i) text += "row " + std::to_string(i) + " " + std::string(90, '.') + "\n";
  tree.write("big.txt", text);
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;
  const ca::ToolResult whole = call(read, context, R"({"file_path": "big.txt"})");
  CHECK(whole.is_error);
  CHECK_THAT(whole.content, Contains("3000 lines") &&
                                Contains("exceeds the maximum that Read returns at once (256.0 KB)") &&
                                Contains("offset=1, limit=2000") && Contains("Grep"));
  const ca::ToolResult part = call(read, context, R"({"file_path": "big.txt", "offset": 2999})");
  CHECK_FALSE(part.is_error);
  CHECK_THAT(part.content, Contains("  2999\trow 2999 ") && Contains("  3000\trow 3000 "));
  const ca::ToolResult limited = call(read, context, R"({"file_path": "big.txt", "limit": 1})");
  CHECK_THAT(limited.content, Contains("     1\trow 1 ") && Contains("of 3000"));
}

TEST_CASE("Read repairs text that is not UTF-8", "[tools][read]") {
  ca::testing::TempTree tree;
  tree.write("latin1.txt", "caf\xE9\n");
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;
  CHECK(call(read, context, R"({"file_path": "latin1.txt"})").content == "     1\tcaf\xEF\xBF\xBD\n");
}

TEST_CASE("Read validates its arguments", "[tools][read]") {
  ca::testing::TempTree tree;
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;
  CHECK_THAT(call(read, context, "{}").content, Contains("The required parameter `file_path` is missing."));
  CHECK_THAT(call(read, context, R"({"file_path": "a", "path": "b"})").content,
             Contains("An unexpected parameter `path` was provided. Valid parameters: file_path, limit, offset."));
  CHECK_THAT(call(read, context, R"({"file_path": "a", "offset": -1})").content,
             Contains("The parameter `offset` must be at least 0, but -1 was provided."));
  CHECK_THAT(call(read, context, R"({"file_path": "a", "limit": 0})").content,
             Contains("The parameter `limit` must be at least 1, but 0 was provided."));
  CHECK_THAT(call(read, context, R"({"file_path": "a", "limit": "10"})").content,
             Contains("The parameter `limit` must be an integer, but a string was provided"));
  CHECK_THAT(call(read, context, R"({"file_path": ""})").content, Contains("`file_path` must not be empty"));
  CHECK(call(read, context, "{}").metadata["invalid_arguments"] == true);
}

TEST_CASE("Read says the file continues where counting its lines would cost too much", "[tools][read]") {
  ca::testing::TempTree tree;
  std::string text;
  for (int i = 1; i <= 200'000; ++i) text += "line " + std::to_string(i) + "\n";  // more than one buffer
  tree.write("f.txt", text);
  ca::ToolContext context(tree.workspace());
  ca::ReadOptions options;
  options.max_counted_bytes = 16;
  ca::ReadTool read(options);
  const ca::ToolResult page = call(read, context, R"({"file_path": "f.txt", "limit": 3})");
  CHECK_FALSE(page.is_error);
  CHECK_THAT(page.content, Contains("[Showing lines 1-3 (the file continues). Call Read with offset=4 to continue.]"));
  CHECK_FALSE(page.metadata.contains("total_lines"));
}
