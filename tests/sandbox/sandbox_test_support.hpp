// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers shared by the sandbox tests: scratch workspaces the sandbox user can reach,
// shell commands, and looking for processes that should no longer exist.

#include <chrono>       // milliseconds, steady_clock
#include <cstdlib>      // getenv
#include <exception>    // exception
#include <filesystem>   // path, directory_iterator
#include <fstream>      // ifstream, ofstream
#include <iterator>     // istreambuf_iterator
#include <random>       // random_device
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <vector>       // vector

#include <sys/stat.h>  // chmod
#include <unistd.h>    // getpid, geteuid

#include <cuda_agent/process.hpp>
#include <cuda_agent/sandbox.hpp>
#include <cuda_agent/sandbox/sandbox_options.hpp>

namespace cuda_agent::testing {

/// A fresh directory under /tmp (which every user can enter), removed with its content.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(std::string_view label) {
    std::random_device random;
    path_ = std::filesystem::path("/tmp") /
            ("cuda-agent-" + std::string(label) + "-" + std::to_string(::getpid()) + "-" + std::to_string(random()));
    std::filesystem::create_directories(path_);
    ::chmod(path_.c_str(), 0755);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream input(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
}

inline bool bubblewrap_installed() { return find_program("bwrap", Environment::from_current({"PATH"})).has_value(); }

inline bool python_installed() { return find_program("python3", Environment::from_current({"PATH"})).has_value(); }

inline bool running_as_root() { return ::geteuid() == 0; }

/// Options for a sandbox whose workspace is `<scratch>/ws`, handed to the sandbox user.
inline SandboxOptions workspace_options(const ScratchDirectory& scratch) {
  SandboxOptions options;
  options.workspace = scratch.path() / "ws";
  std::filesystem::create_directories(options.workspace);
  hand_over_to_sandbox(options.workspace, options);
  return options;
}

/// `bash -c script` with a short deadline.
inline Command shell(std::string script, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  Command command;
  command.argv = {"/bin/bash", "-c", std::move(script)};
  command.timeout = timeout;
  return command;
}

/// Text that appears nowhere else, to recognise a test's own processes.
inline std::string unique_marker() {
  std::random_device random;
  return std::to_string(4000 + random() % 1000) + "." + std::to_string(100000 + random() % 900000);
}

/// Pids of live (not zombie) processes whose command line contains `marker`.
inline std::vector<int> processes_mentioning(std::string_view marker) {
  std::vector<int> found;
  const std::string self = std::to_string(::getpid());
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos || name == self) continue;
    std::string command_line;
    try {
      command_line = read_file(entry.path() / "cmdline");
    } catch (const std::exception&) {
      continue;  // exited while being read
    }
    for (char& each : command_line)
      if (each == '\0') each = ' ';
    if (command_line.find(marker) == std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string pid, comm, state;
    stat >> pid >> comm >> state;
    if (state != "Z" && !state.empty()) found.push_back(std::stoi(name));
  }
  return found;
}

/// Threads of `uid` on the whole host (what RLIMIT_NPROC counts).
inline long threads_of_uid(uid_t uid) {
  long threads = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    bool owned = false;
    long count = 0;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) == 0) owned = std::stoul(line.substr(4)) == uid;
      if (line.rfind("Threads:", 0) == 0) count = std::stol(line.substr(8));
    }
    if (owned) threads += count;
  }
  return threads;
}

inline long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

inline const LimitStatus* find_status(const CommandResult& result, LimitKind kind) {
  for (const LimitStatus& status : result.limits)
    if (status.kind == kind) return &status;
  return nullptr;
}

}  // namespace cuda_agent::testing

/// Leaves the test as skipped where bubblewrap is not installed.
#define CUDA_AGENT_REQUIRE_BUBBLEWRAP()                                                   \
  do {                                                                                    \
    if (!::cuda_agent::testing::bubblewrap_installed())                                   \
      CUDA_AGENT_SKIP("bubblewrap (bwrap) is not installed; apt-get install bubblewrap"); \
  } while (false)
