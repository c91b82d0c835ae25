// SPDX-License-Identifier: Apache-2.0
// The Glob tool: patterns, path, newest-first order, limits and refusals.
#include "catch.hpp"

#include <cuda_agent/tools/glob.hpp>

#include <chrono>
#include <filesystem>
#include <string>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

struct GlobFixture {
  ca::testing::TempTree tree;
  ca::ToolContext context{tree.workspace()};
  ca::GlobTool glob;
  explicit GlobFixture(ca::GlobOptions options = {}) : glob(options) {
    tree.write("kernels/add.cu", "");
    tree.write("kernels/mul.cu", "");
    tree.write("kernels/common.cuh", "");
    tree.write("kernels/deep/inner.cu", "");
    tree.write("model_new.py", "");
    tree.write(".cache/hidden.cu", "");
    tree.set_mtime("kernels/add.cu", 1000);
    tree.set_mtime("kernels/mul.cu", 3000);
    tree.set_mtime("kernels/deep/inner.cu", 2000);
    tree.set_mtime("kernels/common.cuh", 500);
  }
  ca::ToolResult run(json arguments) { return call(glob, context, arguments); }
};

}  // namespace

TEST_CASE("Glob lists matching files newest first", "[tools][glob]") {
  GlobFixture f;
  const ca::ToolResult result = f.run({{"pattern", "**/*.cu"}});
  CHECK_FALSE(result.is_error);
  CHECK(result.content == f.tree.path("kernels/mul.cu") + "\n" + f.tree.path("kernels/deep/inner.cu") + "\n" +
                              f.tree.path("kernels/add.cu"));
  CHECK(result.metadata["matches"] == 3);
  CHECK(f.run({{"pattern", "kernels/*.{cu,cuh}"}}).content == f.tree.path("kernels/mul.cu") + "\n" +
                                                                  f.tree.path("kernels/add.cu") + "\n" +
                                                                  f.tree.path("kernels/common.cuh"));
  CHECK(f.run({{"pattern", "./model_new.py"}}).content == f.tree.path("model_new.py"));
}

TEST_CASE("Glob matches relative to path, and says when a pattern only looked at the top", "[tools][glob]") {
  GlobFixture f;
  CHECK(f.run({{"pattern", "*.cu"}, {"path", "kernels"}}).content ==
        f.tree.path("kernels/mul.cu") + "\n" + f.tree.path("kernels/add.cu"));
  CHECK(f.run({{"pattern", "*.cu"}, {"path", f.tree.path("kernels/deep")}}).content ==
        f.tree.path("kernels/deep/inner.cu"));
  const ca::ToolResult top = f.run({{"pattern", "*.cu"}});
  CHECK_FALSE(top.is_error);
  CHECK(top.content == "No files found. (\"*.cu\" matches only directly inside " + f.tree.workspace().string() +
                           "; 3 files in subdirectories would match \"**/*.cu\".)");
  CHECK(f.run({{"pattern", "*.rs"}}).content == "No files found");
}

TEST_CASE("Glob skips hidden entries unless the pattern names them", "[tools][glob]") {
  GlobFixture f;
  CHECK_THAT(f.run({{"pattern", "**/*.cu"}}).content, !Contains(".cache"));
  CHECK(f.run({{"pattern", ".cache/*.cu"}}).content == f.tree.path(".cache/hidden.cu"));
}

TEST_CASE("Glob accepts absolute patterns inside the workspace only", "[tools][glob]") {
  GlobFixture f;
  CHECK(f.run({{"pattern", f.tree.path("kernels/*.cuh")}}).content == f.tree.path("kernels/common.cuh"));
  const ca::ToolResult outside = f.run({{"pattern", f.tree.outside().string() + "/*"}});
  CHECK(outside.is_error);
  CHECK_THAT(outside.content, Contains("is outside the workspace"));
  CHECK_THAT(f.run({{"pattern", "../outside/*"}}).content, Contains("The pattern may not contain '..'"));
}

TEST_CASE("Glob truncates long result lists", "[tools][glob]") {
  ca::GlobOptions options;
  options.max_results = 2;
  GlobFixture f(options);
  const ca::ToolResult result = f.run({{"pattern", "**/*"}});
  CHECK_THAT(result.content, Contains("(Results are truncated: showing 2 of 5 files. Consider using a more specific "
                                      "path or pattern.)"));
  CHECK(result.metadata["truncated"] == true);
  CHECK_THAT(std::string(ca::GlobTool(options).description()), Contains("at most 2."));
}

TEST_CASE("Glob refuses paths that are not directories, and validates its arguments", "[tools][glob]") {
  GlobFixture f;
  CHECK_THAT(f.run({{"pattern", "*"}, {"path", "model_new.py"}}).content,
             Contains("is not a directory; path must be a directory to search in."));
  CHECK_THAT(f.run({{"pattern", "*"}, {"path", "nowhere"}}).content,
             Contains("Path does not exist: " + f.tree.path("nowhere")));
  CHECK_THAT(f.run({{"pattern", ""}}).content, Contains("The parameter `pattern` must not be empty."));
  CHECK_THAT(f.run({{"path", "kernels"}}).content, Contains("The required parameter `pattern` is missing."));
  CHECK_THAT(f.run({{"pattern", "*"}, {"recursive", true}}).content,
             Contains("An unexpected parameter `recursive` was provided. Valid parameters: path, pattern."));
}

TEST_CASE("Glob refuses a pattern that names nothing, and says when it stopped early", "[tools][glob]") {
  GlobFixture f;
  const ca::ToolResult empty = f.run({{"pattern", "./"}});
  CHECK(empty.is_error);
  CHECK_THAT(empty.content, Contains("The pattern is empty; use \"*\" to match every file of a directory."));

  ca::GlobOptions options;
  options.max_entries = 2;
  GlobFixture few(options);
  const ca::ToolResult stopped = few.run({{"pattern", "**/*"}});
  CHECK_FALSE(stopped.is_error);
  CHECK(stopped.metadata["truncated"] == true);
  CHECK_THAT(stopped.content, Contains("(The search stopped early (more than 2 entries); results may be incomplete. "
                                       "Search a narrower path.)"));

  options = {};
  options.time_budget = std::chrono::milliseconds(-1);
  GlobFixture late(options);
  CHECK_THAT(late.run({{"pattern", "**/*"}}).content, Contains("(The search stopped early (out of time)"));
}
