// SPDX-License-Identifier: Apache-2.0
// The Write tool: creation, the read-before-write rule, atomic replacement that keeps
// mode and owner, protected paths and every refusal.
#include "catch.hpp"

#include <cuda_agent/tools/read.hpp>
#include <cuda_agent/tools/write.hpp>

#include <filesystem>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

mode_t mode_of(const std::string& path) {
  struct stat status {};
  ::lstat(path.c_str(), &status);
  return status.st_mode & 07777;
}

}  // namespace

TEST_CASE("Write creates files and their directories", "[tools][write]") {
  ca::testing::TempTree tree;
  ca::ToolContext context(tree.workspace());
  ca::WriteTool write;
  const ca::ToolResult created =
      call(write, context, json{{"file_path", "kernels/sub/add.cu"}, {"content", "__global__ void add() {}\n"}});
  CHECK_FALSE(created.is_error);
  CHECK(created.content == "File created successfully at: " + tree.path("kernels/sub/add.cu"));
  CHECK(tree.read("kernels/sub/add.cu") == "__global__ void add() {}\n");
  CHECK(mode_of(tree.path("kernels/sub/add.cu")) == 0644);
  CHECK(created.metadata["created"] == true);
  // A file the tool wrote counts as read: it can be written again at once.
  const ca::ToolResult again =
      call(write, context, json{{"file_path", tree.path("kernels/sub/add.cu")}, {"content", "v2"}});
  CHECK_FALSE(again.is_error);
  CHECK(again.content == "The file " + tree.path("kernels/sub/add.cu") + " has been updated (1 line, 2 bytes).");
  CHECK(tree.read("kernels/sub/add.cu") == "v2");
  // No temporary files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(tree.workspace() / "kernels/sub"))
    CHECK(entry.path().filename() == "add.cu");
}

TEST_CASE("Write replaces an existing file only after it was read, and unchanged since", "[tools][write]") {
  ca::testing::TempTree tree;
  tree.write("model_new.py", "old\n");
  ca::ToolContext context(tree.workspace());
  ca::WriteTool write;
  ca::ReadTool read;

  const ca::ToolResult unread = call(write, context, R"({"file_path": "model_new.py", "content": "new\n"})");
  CHECK(unread.is_error);
  CHECK_THAT(unread.content,
             Contains("File has not been read yet: " + tree.path("model_new.py")) && Contains("Read it first"));
  CHECK(tree.read("model_new.py") == "old\n");

  REQUIRE_FALSE(call(read, context, R"({"file_path": "model_new.py"})").is_error);
  tree.write("model_new.py", "changed behind the model's back\n");
  tree.set_mtime("model_new.py", 1'000'000);
  const ca::ToolResult stale = call(write, context, R"({"file_path": "model_new.py", "content": "new\n"})");
  CHECK(stale.is_error);
  CHECK_THAT(stale.content, Contains("File has been modified since it was read") && Contains("Read it again"));

  REQUIRE_FALSE(call(read, context, R"({"file_path": "model_new.py"})").is_error);
  const ca::ToolResult fresh = call(write, context, R"({"file_path": "model_new.py", "content": "new\n"})");
  CHECK_FALSE(fresh.is_error);
  CHECK(tree.read("model_new.py") == "new\n");
}

TEST_CASE("Write keeps the mode of the file it replaces", "[tools][write]") {
  ca::testing::TempTree tree;
  tree.write("run.sh", "#!/bin/sh\n");
  ::chmod(tree.path("run.sh").c_str(), 0755);
  ca::ToolContext context(tree.workspace());
  ca::ReadTool read;
  ca::WriteTool write;
  REQUIRE_FALSE(call(read, context, R"({"file_path": "run.sh"})").is_error);
  REQUIRE_FALSE(call(write, context, R"({"file_path": "run.sh", "content": "#!/bin/sh\necho hi\n"})").is_error);
  CHECK(mode_of(tree.path("run.sh")) == 0755);
}

TEST_CASE("Write gives new files to the workspace's owner when running as root", "[tools][write]") {
  if (::geteuid() != 0) CUDA_AGENT_SKIP("needs root: only root can give files to another user");
  ca::testing::TempTree tree;
  tree.write("kept.txt", "x");
  REQUIRE(::chown(tree.workspace().c_str(), 65534, 65534) == 0);
  REQUIRE(::chown(tree.path("kept.txt").c_str(), 12345, 12345) == 0);
  ca::ToolContext context(tree.workspace());
  ca::WriteTool write;
  ca::ReadTool read;
  REQUIRE_FALSE(call(write, context, R"({"file_path": "dir/new.txt", "content": "x"})").is_error);
  struct stat status {};
  REQUIRE(::stat(tree.path("dir/new.txt").c_str(), &status) == 0);
  CHECK(status.st_uid == 65534);
  CHECK(status.st_gid == 65534);
  REQUIRE(::stat(tree.path("dir").c_str(), &status) == 0);
  CHECK(status.st_uid == 65534);
  // A replaced file keeps its own owner.
  REQUIRE_FALSE(call(read, context, R"({"file_path": "kept.txt"})").is_error);
  REQUIRE_FALSE(call(write, context, R"({"file_path": "kept.txt", "content": "y"})").is_error);
  REQUIRE(::stat(tree.path("kept.txt").c_str(), &status) == 0);
  CHECK(status.st_uid == 12345);
}

TEST_CASE("Write refuses directories, links, protected paths and oversized content", "[tools][write]") {
  ca::testing::TempTree tree;
  tree.write("kernels/a.cu", "a");
  tree.write("model.py", "reference\n");
  tree.write("harness/check.py", "trusted\n");
  std::filesystem::create_symlink("kernels/a.cu", tree.workspace() / "link.cu");
  ca::ToolContext context(tree.workspace(), {"model.py", "harness"});
  ca::WriteOptions options;
  options.max_content_bytes = 10;
  ca::WriteTool write(options);

  const ca::ToolResult directory = call(write, context, R"({"file_path": "kernels", "content": "x"})");
  CHECK_THAT(directory.content, Contains("is a directory, not a file"));
  const ca::ToolResult root =
      call(write, context, nlohmann::json{{"file_path", tree.workspace().string()}, {"content", "x"}});
  CHECK_THAT(root.content, Contains("is the workspace directory itself"));
  const ca::ToolResult link = call(write, context, R"({"file_path": "link.cu", "content": "x"})");
  CHECK_THAT(link.content,
             Contains("is a symbolic link (to kernels/a.cu); write or edit the file it points to instead"));
  const ca::ToolResult model = call(write, context, R"({"file_path": "model.py", "content": "x"})");
  CHECK(model.is_error);
  CHECK_THAT(model.content, Contains(tree.path("model.py") + " is protected: it is read-only for this task."));
  const ca::ToolResult inside = call(write, context, R"({"file_path": "harness/check.py", "content": "x"})");
  CHECK_THAT(inside.content, Contains("is protected (it is, or lies in, " + tree.path("harness") + ")"));
  const ca::ToolResult new_inside = call(write, context, R"({"file_path": "harness/new/evil.py", "content": "x"})");
  CHECK(new_inside.is_error);
  CHECK_FALSE(tree.exists("harness/new"));
  CHECK(tree.read("model.py") == "reference\n");
  CHECK(tree.read("harness/check.py") == "trusted\n");
  const ca::ToolResult big = call(write, context, R"({"file_path": "big.txt", "content": "01234567890"})");
  CHECK_THAT(big.content, Contains("The content is 11 bytes; Write accepts at most 10 bytes."));
  CHECK_FALSE(tree.exists("big.txt"));
}

TEST_CASE("Write validates its arguments", "[tools][write]") {
  ca::testing::TempTree tree;
  ca::ToolContext context(tree.workspace());
  ca::WriteTool write;
  CHECK_THAT(call(write, context, R"({"file_path": "a"})").content,
             Contains("The required parameter `content` is missing."));
  CHECK_THAT(call(write, context, R"({"file_path": "a", "content": 3})").content,
             Contains("The parameter `content` must be a string, but an integer was provided (3)."));
  CHECK_THAT(call(write, context, R"({"path": "a", "content": ""})").content,
             Contains("The required parameter `file_path` is missing.") &&
                 Contains("An unexpected parameter `path` was provided."));
  // An empty content is a valid (empty) file.
  CHECK_FALSE(call(write, context, R"({"file_path": "empty.txt", "content": ""})").is_error);
  CHECK(tree.exists("empty.txt"));
}
