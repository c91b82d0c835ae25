// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared by the tool tests: a temporary workspace with a sibling "outside" directory, a
// sandbox over it, a sandbox that records commands, and call helpers.

#include <algorithm>     // sort
#include <cstdlib>       // mkdtemp
#include <filesystem>    // path, remove_all
#include <fstream>       // ifstream, ofstream
#include <iterator>      // istreambuf_iterator
#include <optional>      // optional
#include <stdexcept>     // runtime_error
#include <string>        // string
#include <system_error>  // error_code
#include <utility>       // move
#include <vector>        // vector

#include <fcntl.h>     // AT_FDCWD
#include <sys/stat.h>  // utimensat

#include <nlohmann/json.hpp>

#include <cuda_agent/process.hpp>
#include <cuda_agent/sandbox.hpp>
#include <cuda_agent/sandbox/sandbox_options.hpp>
#include <cuda_agent/tool.hpp>

namespace cuda_agent::testing {

/// A fresh directory tree for one test: `workspace` and, beside it, `outside` (which
/// tools must never reach). Removed with everything in it at the end.
class TempTree {
 public:
  TempTree() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cuda-agent-tools-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    base_ = pattern;
    std::filesystem::create_directories(workspace());
    std::filesystem::create_directories(outside());
    write_outside("secret.txt", "TOP-SECRET-CONTENT\n");
  }
  ~TempTree() {
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  [[nodiscard]] std::filesystem::path base() const { return base_; }
  [[nodiscard]] std::filesystem::path workspace() const { return base_ / "ws"; }
  [[nodiscard]] std::filesystem::path outside() const { return base_ / "outside"; }
  [[nodiscard]] std::string path(const std::string& relative) const { return (workspace() / relative).string(); }

  void write(const std::string& relative, const std::string& content) const {
    write_file(workspace() / relative, content);
  }
  void write_outside(const std::string& relative, const std::string& content) const {
    write_file(outside() / relative, content);
  }
  [[nodiscard]] std::string read(const std::string& relative) const { return read_file(workspace() / relative); }
  [[nodiscard]] bool exists(const std::string& relative) const {
    std::error_code ignored;
    return std::filesystem::exists(std::filesystem::symlink_status(workspace() / relative, ignored));
  }

  /// Sets a file's modification time to `seconds` after the epoch.
  void set_mtime(const std::string& relative, long seconds) const {
    const timespec times[2] = {{seconds, 0}, {seconds, 0}};
    ::utimensat(AT_FDCWD, path(relative).c_str(), times, AT_SYMLINK_NOFOLLOW);
  }

  static void write_file(const std::filesystem::path& file, const std::string& content) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << content;
  }
  static std::string read_file(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  /// Every file name under `outside`, for checking that nothing appeared there.
  [[nodiscard]] std::vector<std::string> outside_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(outside()))
      names.push_back(entry.path().lexically_relative(outside()).string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path base_;
};

/// Options for a sandbox whose workspace is `tree`'s, with `protected_paths`: the tree
/// becomes enterable by every user and the workspace is handed to the sandbox user (when
/// running as root), so that commands can write there. Files the test creates afterwards
/// belong to the test's user until `hand_over_to_sandbox(tree.workspace(), options)`.
inline SandboxOptions sandbox_options_for(const TempTree& tree,
                                          std::vector<std::filesystem::path> protected_paths = {}) {
  std::filesystem::permissions(tree.base(), std::filesystem::perms(0755));
  SandboxOptions options;
  options.workspace = tree.workspace();
  options.protected_paths = std::move(protected_paths);
  hand_over_to_sandbox(tree.workspace(), options);
  return options;
}

/// Records the command and answers with a canned result (or throws, if told to).
struct RecordingSandbox {
  std::vector<Command> commands;
  CommandResult answer;
  std::optional<std::string> fail_with;
  /// Fail as run_process does when the program cannot start, instead of as a sandbox.
  bool fail_as_process = false;
  CommandResult run(const Command& command) {
    commands.push_back(command);
    if (fail_with && fail_as_process)
      throw ProcessError(std::make_error_code(std::errc::no_such_file_or_directory), *fail_with);
    if (fail_with) throw SandboxError(*fail_with);
    return answer;
  }
};
static_assert(Sandbox<RecordingSandbox>);

/// Calls a tool with JSON arguments given as text.
template <class T>
ToolResult call(T& tool, ToolContext& context, const char* arguments) {
  return tool.invoke(nlohmann::json::parse(arguments), context);
}
template <class T>
ToolResult call(T& tool, ToolContext& context, const nlohmann::json& arguments) {
  return tool.invoke(arguments, context);
}

}  // namespace cuda_agent::testing
