// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The candidate's source files in a workspace (`model_new.py` and the sources under
/// `kernels/`), their content hash, and snapshots of them: what the agent loop hands to
/// the trusted evaluator and keeps as the best answer.

#include <algorithm>     // sort, any_of
#include <filesystem>    // path, directory iteration, copy_file
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <vector>        // vector

#include "cuda_agent/detail/files.hpp"  // read_file
#include "cuda_agent/detail/sha256.hpp"

namespace cuda_agent::detail {

/// Extensions of the source files under `kernels/` that make up a candidate.
inline constexpr std::string_view candidate_source_extensions[] = {".cu", ".cuh", ".cpp", ".h", ".hpp", ".cc"};

/// The candidate files of `directory`, relative to it, sorted. Symbolic links are not
/// followed: a candidate consists of regular files only.
[[nodiscard]] inline std::vector<std::filesystem::path> candidate_files(const std::filesystem::path& directory) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code error;
  if (fs::is_regular_file(fs::symlink_status(directory / "model_new.py", error))) files.emplace_back("model_new.py");
  const fs::path kernels = directory / "kernels";
  if (fs::is_directory(fs::symlink_status(kernels, error))) {
    for (fs::recursive_directory_iterator it(kernels, fs::directory_options::none, error), end; !error && it != end;
         it.increment(error)) {
      if (!it->is_regular_file(error) || it->is_symlink(error)) continue;
      const std::string extension = it->path().extension().string();
      const bool source = std::any_of(std::begin(candidate_source_extensions), std::end(candidate_source_extensions),
                                      [&](std::string_view wanted) { return extension == wanted; });
      if (source) files.push_back(fs::relative(it->path(), directory));
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// SHA-256 over the candidate files' names and contents; empty when there are none.
[[nodiscard]] inline std::string candidate_hash(const std::filesystem::path& directory) {
  const auto files = candidate_files(directory);
  if (files.empty()) return {};
  Sha256 hash;
  hash.update("cuda-agent candidate v1\n");
  for (const auto& file : files) {
    const std::string content = read_file(directory / file);
    hash.update(file.generic_string()).update(std::string_view("\0", 1));
    hash.update(std::to_string(content.size())).update(std::string_view("\0", 1)).update(content);
  }
  return hash.hex_digest();
}

/// Copies the candidate files of `from` into `to` (emptied first). Returns the files copied.
inline std::vector<std::filesystem::path> snapshot_candidate(const std::filesystem::path& from,
                                                             const std::filesystem::path& to) {
  namespace fs = std::filesystem;
  auto files = candidate_files(from);
  fs::remove_all(to);
  fs::create_directories(to);
  for (const auto& file : files) {
    fs::create_directories((to / file).parent_path());
    fs::copy_file(from / file, to / file, fs::copy_options::overwrite_existing);
  }
  return files;
}

}  // namespace cuda_agent::detail
