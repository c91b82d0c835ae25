// SPDX-License-Identifier: Apache-2.0
// The path-traversal set: "..", absolute paths, symbolic links that lead out, protected
// files reached directly or through links, very long names, and a symlink race. Every
// file tool, under each resolution mechanism, must refuse them all.
#include "catch.hpp"

#include <cuda_agent/tools/detail/confined_fs.hpp>
#include <cuda_agent/tools/tools.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

bool openat2_available(const std::filesystem::path& directory) {
  try {
    ca::detail::ConfinedRoot root(directory, ca::PathResolution::kernel_beneath);
    return true;
  } catch (const ca::detail::ToolFailure&) {
    return false;
  }
}

/// The file tools, all resolving paths with one mechanism.
struct FileTools {
  ca::ReadTool read;
  ca::WriteTool write;
  ca::EditTool edit;
  ca::MultiEditTool multi_edit;
  ca::GrepTool grep;
  ca::GlobTool glob;
  explicit FileTools(ca::PathResolution resolution)
      : read(make<ca::ReadOptions>(resolution)),
        write(make<ca::WriteOptions>(resolution)),
        edit(make<ca::EditOptions>(resolution)),
        multi_edit(make<ca::EditOptions>(resolution)),
        grep(make<ca::GrepOptions>(resolution)),
        glob(make<ca::GlobOptions>(resolution)) {}
  template <class Options>
  static Options make(ca::PathResolution resolution) {
    Options options;
    options.resolution = resolution;
    return options;
  }
};

/// The workspace every test starts from: a kernel, protected files, and links.
struct TraversalFixture {
  ca::testing::TempTree tree;
  ca::ToolContext context{tree.workspace(), {"model.py", "harness", "SKILL.md"}};
  TraversalFixture() {
    tree.write("kernels/add.cu", "__global__ void add() {}\n");
    tree.write("model.py", "class Model: pass\n");
    tree.write("SKILL.md", "skill\n");
    tree.write("harness/check.py", "trusted\n");
    const std::filesystem::path ws = tree.workspace();
    std::filesystem::create_directory_symlink("../outside", ws / "link_out");
    std::filesystem::create_directory_symlink(tree.outside(), ws / "abs_link");
    std::filesystem::create_symlink("../outside/secret.txt", ws / "file_link");
    std::filesystem::create_symlink("chain2", ws / "chain1");
    std::filesystem::create_symlink("kernels/../../outside/secret.txt", ws / "chain2");
    std::filesystem::create_directory_symlink("kernels", ws / "inside_link");
    std::filesystem::create_directory_symlink(".", ws / "alias");
    std::filesystem::create_directory_symlink("harness", ws / "harness_link");
    std::filesystem::create_symlink("/proc/self/root/etc/passwd", ws / "magic_link");
    REQUIRE(::link((ws / "model.py").c_str(), (ws / "kernels/model_copy.py").c_str()) == 0);
  }
};

std::vector<ca::PathResolution> resolutions(const std::filesystem::path& directory) {
  std::vector<ca::PathResolution> modes = {ca::PathResolution::component_walk};
  if (openat2_available(directory)) modes.push_back(ca::PathResolution::kernel_beneath);
  return modes;
}

const char* name_of(ca::PathResolution resolution) {
  return resolution == ca::PathResolution::kernel_beneath ? "openat2" : "component walk";
}

}  // namespace

TEST_CASE("paths outside the workspace are refused by every file tool", "[tools][confinement]") {
  TraversalFixture f;
  const std::string outside_secret = (f.tree.outside() / "secret.txt").string();
  for (const ca::PathResolution resolution : resolutions(f.tree.workspace())) {
    INFO("resolution: " << name_of(resolution));
    FileTools tools(resolution);
    for (const std::string& path :
         {std::string("../outside/secret.txt"), std::string("kernels/../../outside/secret.txt"), outside_secret,
          std::string("/etc/passwd"), std::string(".."), f.tree.workspace().string() + "/../outside/secret.txt"}) {
      INFO("path: " << path);
      const ca::ToolResult read = call(tools.read, f.context, json{{"file_path", path}});
      CHECK(read.is_error);
      CHECK_THAT(read.content, Contains("outside the workspace"));
      CHECK_THAT(read.content, !Contains("TOP-SECRET"));
      CHECK(call(tools.write, f.context, json{{"file_path", path}, {"content", "x"}}).is_error);
      CHECK(call(tools.edit, f.context, json{{"file_path", path}, {"old_string", ""}, {"new_string", "x"}}).is_error);
      CHECK(call(tools.multi_edit, f.context,
                 json{{"file_path", path}, {"edits", {{{"old_string", ""}, {"new_string", "x"}}}}})
                .is_error);
      CHECK(call(tools.grep, f.context, json{{"pattern", "SECRET"}, {"path", path}}).is_error);
    }
    CHECK(call(tools.glob, f.context, json{{"pattern", "*"}, {"path", "../outside"}}).is_error);
    CHECK(call(tools.glob, f.context, json{{"pattern", "*"}, {"path", f.tree.outside().string()}}).is_error);
    CHECK(f.tree.read_file(f.tree.outside() / "secret.txt") == "TOP-SECRET-CONTENT\n");
    CHECK(f.tree.outside_entries() == std::vector<std::string>{"secret.txt"});
  }
}

TEST_CASE("symbolic links cannot lead out of the workspace", "[tools][confinement]") {
  TraversalFixture f;
  for (const ca::PathResolution resolution : resolutions(f.tree.workspace())) {
    INFO("resolution: " << name_of(resolution));
    FileTools tools(resolution);
    for (const std::string path : {"link_out/secret.txt", "abs_link/secret.txt", "file_link", "chain1",
                                   "inside_link/../../outside/secret.txt", "magic_link"}) {
      INFO("path: " << path);
      const ca::ToolResult read = call(tools.read, f.context, json{{"file_path", path}});
      CHECK(read.is_error);
      CHECK_THAT(read.content, !Contains("TOP-SECRET") && !Contains("root:"));
    }
    CHECK_THAT(call(tools.read, f.context, R"({"file_path": "link_out/secret.txt"})").content,
               Contains("leads outside the workspace"));

    // Writing through a link to a directory outside creates nothing there.
    CHECK(call(tools.write, f.context, R"({"file_path": "link_out/new.txt", "content": "x"})").is_error);
    CHECK(call(tools.write, f.context, R"({"file_path": "abs_link/sub/new.txt", "content": "x"})").is_error);
    CHECK(call(tools.edit, f.context, R"({"file_path": "link_out/new.txt", "old_string": "", "new_string": "x"})")
              .is_error);
    // A link to a file outside is never written through.
    CHECK_THAT(call(tools.write, f.context, R"({"file_path": "file_link", "content": "x"})").content,
               Contains("is a symbolic link"));
    CHECK(
        call(tools.edit, f.context, R"({"file_path": "file_link", "old_string": "TOP", "new_string": "x"})").is_error);
    CHECK(call(tools.multi_edit, f.context,
               R"({"file_path": "file_link", "edits": [{"old_string": "TOP", "new_string": "x"}]})")
              .is_error);

    // Directory walks do not follow links.
    const ca::ToolResult grep = call(tools.grep, f.context, R"({"pattern": "SECRET", "output_mode": "content"})");
    CHECK(grep.content == "No matches found");
    CHECK(call(tools.grep, f.context, R"({"pattern": "SECRET", "path": "link_out"})").is_error);
    CHECK(call(tools.grep, f.context, R"({"pattern": "SECRET", "path": "file_link"})").is_error);
    const ca::ToolResult glob = call(tools.glob, f.context, R"({"pattern": "**/*"})");
    CHECK_THAT(glob.content, !Contains("secret") && Contains("add.cu"));
    CHECK(call(tools.glob, f.context, R"({"pattern": "*", "path": "link_out"})").is_error);

    CHECK(f.tree.read_file(f.tree.outside() / "secret.txt") == "TOP-SECRET-CONTENT\n");
    CHECK(f.tree.outside_entries() == std::vector<std::string>{"secret.txt"});
  }
}

TEST_CASE("links that stay inside the workspace are followed for reading", "[tools][confinement]") {
  TraversalFixture f;
  for (const ca::PathResolution resolution : resolutions(f.tree.workspace())) {
    INFO("resolution: " << name_of(resolution));
    FileTools tools(resolution);
    CHECK(call(tools.read, f.context, R"({"file_path": "inside_link/add.cu"})").content ==
          "     1\t__global__ void add() {}\n");
    CHECK(call(tools.read, f.context, R"({"file_path": "alias/alias/kernels/add.cu"})").content ==
          "     1\t__global__ void add() {}\n");
    CHECK_FALSE(call(tools.write, f.context, R"({"file_path": "inside_link/new.cu", "content": "x"})").is_error);
    CHECK(f.tree.read("kernels/new.cu") == "x");
  }
}

TEST_CASE("protected paths refuse writes however they are reached", "[tools][confinement]") {
  TraversalFixture f;
  FileTools reader(ca::PathResolution::automatic);
  for (const std::string path : {"model.py", "SKILL.md", "harness/check.py"})
    REQUIRE_FALSE(call(reader.read, f.context, json{{"file_path", path}}).is_error);  // protected files stay readable
  REQUIRE_FALSE(call(reader.read, f.context, R"({"file_path": "kernels/model_copy.py"})").is_error);

  for (const ca::PathResolution resolution : resolutions(f.tree.workspace())) {
    INFO("resolution: " << name_of(resolution));
    FileTools tools(resolution);
    for (const std::string& path :
         {std::string("model.py"), std::string("./model.py"), std::string("kernels/../model.py"),
          f.tree.path("model.py"), std::string("alias/model.py"), std::string("alias/alias/SKILL.md"),
          std::string("kernels/model_copy.py"), std::string("harness/check.py"), std::string("harness/new.py"),
          std::string("harness_link/check.py"), std::string("harness_link/new.py"),
          std::string("harness_link/deep/new.py"), std::string("alias/harness/new.py")}) {
      INFO("path: " << path);
      const ca::ToolResult write = call(tools.write, f.context, json{{"file_path", path}, {"content", "pwned"}});
      CHECK(write.is_error);
      CHECK_THAT(write.content, Contains("is protected"));
      CHECK_THAT(
          call(tools.edit, f.context, json{{"file_path", path}, {"old_string", "class"}, {"new_string", "x"}}).content,
          Contains("protected") || Contains("does not exist"));
      CHECK(call(tools.edit, f.context, json{{"file_path", path}, {"old_string", ""}, {"new_string", "x"}}).is_error);
      CHECK(call(tools.multi_edit, f.context,
                 json{{"file_path", path}, {"edits", {{{"old_string", "class"}, {"new_string", "x"}}}}})
                .is_error);
    }
    CHECK(f.tree.read("model.py") == "class Model: pass\n");
    CHECK(f.tree.read("SKILL.md") == "skill\n");
    CHECK(f.tree.read("harness/check.py") == "trusted\n");
    CHECK_FALSE(f.tree.exists("harness/new.py"));
    CHECK_FALSE(f.tree.exists("harness/deep"));
  }
  // The whole workspace can be protected.
  ca::ToolContext frozen(f.tree.workspace(), {"."});
  CHECK_THAT(call(reader.write, frozen, R"({"file_path": "kernels/x.cu", "content": "x"})").content,
             Contains("the whole workspace is read-only"));
}

TEST_CASE("very long names and paths are refused with a clear message", "[tools][confinement]") {
  TraversalFixture f;
  for (const ca::PathResolution resolution : resolutions(f.tree.workspace())) {
    INFO("resolution: " << name_of(resolution));
    FileTools tools(resolution);
    const std::string long_name = "kernels/" + std::string(300, 'n') + ".cu";
    CHECK_THAT(call(tools.write, f.context, json{{"file_path", long_name}, {"content", "x"}}).content,
               Contains("is too long: each file name is limited to 255 bytes"));
    CHECK_THAT(call(tools.read, f.context, json{{"file_path", long_name}}).content, Contains("too long"));
    CHECK_THAT(
        call(tools.write, f.context, json{{"file_path", std::string(300, 'd') + "/x.cu"}, {"content", "x"}}).content,
        Contains("too long"));
    std::string long_path;
    for (int i = 0; i < 60; ++i) long_path += std::string(80, 'p') + "/";
    CHECK_THAT(call(tools.write, f.context, json{{"file_path", long_path + "x.cu"}, {"content", "x"}}).content,
               Contains("too long"));
    CHECK_THAT(
        call(tools.read, f.context, json{{"file_path", std::string("kernels/add.cu\0/../../outside", 30)}}).content,
        Contains("contains a NUL character"));
    // Deep but legal paths work.
    std::string deep;
    for (int i = 0; i < 30; ++i) deep += std::string(100, 'q') + "/";
    CHECK_FALSE(call(tools.write, f.context, json{{"file_path", deep + "ok.txt"}, {"content", "x"}}).is_error);
  }
  CHECK(f.tree.outside_entries() == std::vector<std::string>{"secret.txt"});
}

TEST_CASE("a directory swapped for a link to outside during tool calls never lets them out",
          "[tools][confinement][slow]") {
  TraversalFixture f;
  f.tree.write("swap/f.txt", "inside\n");
  f.tree.write_outside("f.txt", "SECRET-F\n");
  const std::filesystem::path ws = f.tree.workspace();
  for (const ca::PathResolution resolution : resolutions(ws)) {
    INFO("resolution: " << name_of(resolution));
    FileTools tools(resolution);
    std::atomic<bool> stop{false};
    std::atomic<long> swaps{0};
    std::thread swapper([&] {
      std::error_code ignored;
      while (!stop) {
        std::filesystem::rename(ws / "swap", ws / "swap_real", ignored);
        // Relative on odd rounds, absolute on even ones: both must be refused.
        if (swaps % 2 == 1)
          std::filesystem::create_directory_symlink("../outside", ws / "swap", ignored);
        else
          std::filesystem::create_directory_symlink(f.tree.outside(), ws / "swap", ignored);
        std::this_thread::yield();
        std::filesystem::remove(ws / "swap", ignored);
        std::filesystem::rename(ws / "swap_real", ws / "swap", ignored);
        ++swaps;
      }
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    long calls = 0;
    long successes = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::vector<ca::ToolResult> results = {
          call(tools.read, f.context, R"({"file_path": "swap/f.txt"})"),
          call(tools.grep, f.context, R"({"pattern": "SECRET", "path": "swap", "output_mode": "content"})"),
          call(tools.grep, f.context, R"({"pattern": "SECRET", "output_mode": "content"})"),
          call(tools.glob, f.context, R"({"pattern": "**/*", "path": "swap"})"),
          call(tools.write, f.context,
               json{{"file_path", "swap/new" + std::to_string(calls) + ".txt"}, {"content", "x"}}),
          call(tools.read, f.context, R"({"file_path": "swap/f.txt"})"),
          call(tools.edit, f.context,
               R"({"file_path": "swap/f.txt", "old_string": "inside", "new_string": "inside!"})"),
          call(tools.edit, f.context,
               json{{"file_path", "swap/g" + std::to_string(calls) + ".txt"}, {"old_string", ""}, {"new_string", "y"}}),
      };
      for (const ca::ToolResult& result : results) {
        CHECK_THAT(result.content, !Contains("SECRET") && !Contains("secret.txt"));
        if (!result.is_error) ++successes;
      }
      ++calls;
    }
    stop = true;
    swapper.join();
    INFO(calls << " rounds of calls, " << successes << " succeeded, " << swaps << " swaps");
    CHECK(calls > 5);
    CHECK(swaps > 5);
    CHECK(f.tree.outside_entries() == std::vector<std::string>{"f.txt", "secret.txt"});
    CHECK(f.tree.read_file(f.tree.outside() / "f.txt") == "SECRET-F\n");
    CHECK(f.tree.read_file(f.tree.outside() / "secret.txt") == "TOP-SECRET-CONTENT\n");
  }
}

TEST_CASE("every way a path can fail is explained in words", "[tools][confinement]") {
  using ca::detail::describe_path_error;
  const std::string path = "/ws/k.cu";
  CHECK(describe_path_error(ENOENT, path) == "/ws/k.cu does not exist.");
  CHECK(describe_path_error(ENOTDIR, path) == "/ws/k.cu: a component of the path is not a directory.");
  CHECK_THAT(describe_path_error(EXDEV, path), Contains("/ws/k.cu leads outside the workspace (through '..' or a "
                                                        "symbolic link)"));
  CHECK(describe_path_error(ELOOP, path) ==
        "/ws/k.cu goes through too many symbolic links, or is a symbolic link where a file was expected.");
  CHECK_THAT(describe_path_error(ENAMETOOLONG, path), Contains("is too long: each file name is limited to 255 bytes"));
  CHECK(describe_path_error(EACCES, path) == "Permission denied: /ws/k.cu.");
  CHECK(describe_path_error(EPERM, path) == "Permission denied: /ws/k.cu.");
  CHECK(describe_path_error(EISDIR, path) == "/ws/k.cu is a directory.");
  CHECK(describe_path_error(ENOSPC, path) == "No space left on the device while writing /ws/k.cu.");
  CHECK(describe_path_error(EDQUOT, path) == "The disk quota was exceeded while writing /ws/k.cu.");
  CHECK(describe_path_error(EFBIG, path) == "/ws/k.cu would exceed the maximum file size.");
  CHECK(describe_path_error(EROFS, path) == "/ws/k.cu is on a read-only file system.");
  CHECK(describe_path_error(EIO, path) == "/ws/k.cu: " + std::string(std::strerror(EIO)) + ".");

  struct stat device {};
  REQUIRE(::stat("/dev/null", &device) == 0);
  CHECK(ca::detail::WorkspaceFiles::file_kind(device) == "character device");
}

TEST_CASE("a workspace protected as a whole refuses every write", "[tools][confinement]") {
  ca::testing::TempTree tree;
  tree.write("k.cu", "int a;\n");
  ca::ToolContext context(tree.workspace(), {"."});
  ca::ReadTool read;
  ca::WriteTool write;
  REQUIRE_FALSE(call(read, context, R"({"file_path": "k.cu"})").is_error);
  const ca::ToolResult refused = call(write, context, R"({"file_path": "k.cu", "content": "int b;\n"})");
  CHECK(refused.is_error);
  CHECK_THAT(refused.content, Contains(tree.path("k.cu") + " is protected (the whole workspace is read-only): it is "
                                                           "read-only for this task."));
  CHECK_THAT(call(write, context, R"({"file_path": "new.cu", "content": "x"})").content,
             Contains("(the whole workspace is read-only)"));
  CHECK(tree.read("k.cu") == "int a;\n");
  CHECK_FALSE(tree.exists("new.cu"));
}
