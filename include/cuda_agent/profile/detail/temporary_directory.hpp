// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A uniquely named directory that is removed with everything in it when its owner goes.

#include <cerrno>        // errno
#include <filesystem>    // path, temp_directory_path, remove_all, permissions
#include <string>        // string
#include <system_error>  // error_code, system_category
#include <utility>       // exchange
#include <vector>        // vector

#include <stdlib.h>  // mkdtemp

namespace cuda_agent::detail {

class TemporaryDirectory {
 public:
  /// Creates `<parent>/<prefix>XXXXXX` with mode 0700; `parent` defaults to the system's
  /// temporary directory. Throws std::filesystem::filesystem_error on failure.
  explicit TemporaryDirectory(const std::string& prefix, std::filesystem::path parent = {}) {
    if (parent.empty()) parent = std::filesystem::temp_directory_path();
    std::filesystem::create_directories(parent);
    std::string pattern = (parent / (prefix + "XXXXXX")).string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr)
      throw std::filesystem::filesystem_error("cannot create a temporary directory", parent,
                                              std::error_code(errno, std::system_category()));
    path_ = buffer.data();
  }

  TemporaryDirectory(TemporaryDirectory&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TemporaryDirectory& operator=(TemporaryDirectory&& other) noexcept {
    if (this != &other) {
      remove();
      path_ = std::exchange(other.path_, {});
    }
    return *this;
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  ~TemporaryDirectory() { remove(); }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void remove() noexcept {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    path_.clear();
  }
  std::filesystem::path path_;
};

}  // namespace cuda_agent::detail
