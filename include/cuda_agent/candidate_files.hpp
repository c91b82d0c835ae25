// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The files that make up a candidate, per the workspace contract: `model_new.py` and
/// the C++/CUDA sources under `kernels/`. Reading them is the first step of every build
/// and of every trusted evaluation, and the directory is written by an untrusted agent,
/// so symbolic links are never followed and sizes are bounded.

#include <filesystem>   // path
#include <map>          // map
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // pair
#include <vector>       // vector

#include "cuda_agent/detail/files.hpp"

namespace cuda_agent {

/// The folder (relative to a candidate directory) that holds the extension's sources.
inline constexpr std::string_view candidate_kernels_directory = "kernels";
/// The Python module that defines `ModelNew`.
inline constexpr std::string_view candidate_model_file = "model_new.py";
/// The name of the one extension module the kernels are built into.
inline constexpr std::string_view candidate_extension_name = "cuda_extension";

/// The extension of `path` (lower case, with the dot), e.g. ".cu".
[[nodiscard]] inline std::string source_extension(std::string_view path) {
  const std::string name(path.substr(path.find_last_of('/') + 1));
  const auto dot = name.find_last_of('.');
  std::string extension = dot == std::string::npos ? std::string() : name.substr(dot);
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return extension;
}

/// C++ translation units (compiled by the host compiler).
[[nodiscard]] inline bool is_cxx_translation_unit(std::string_view path) {
  const std::string extension = source_extension(path);
  return extension == ".cpp" || extension == ".cc" || extension == ".cxx";
}

/// CUDA translation units (compiled by nvcc).
[[nodiscard]] inline bool is_cuda_translation_unit(std::string_view path) { return source_extension(path) == ".cu"; }

/// Headers a translation unit may include.
[[nodiscard]] inline bool is_source_header(std::string_view path) {
  const std::string extension = source_extension(path);
  return extension == ".h" || extension == ".hpp" || extension == ".hh" || extension == ".hxx" || extension == ".cuh" ||
         extension == ".inl";
}

/// Whether `relative` (a '/'-separated path inside a candidate directory) belongs to
/// the candidate: `model_new.py`, or a source or header below `kernels/`.
[[nodiscard]] inline bool is_candidate_source_path(std::string_view relative) {
  if (relative == candidate_model_file) return true;
  const std::string prefix = std::string(candidate_kernels_directory) + "/";
  if (relative.substr(0, prefix.size()) != prefix) return false;
  // Hidden files and Python caches are never sources.
  for (std::size_t at = 0; at < relative.size(); at = relative.find('/', at) + 1) {
    if (relative[at] == '.') return false;
    if (relative.substr(at, 11) == "__pycache__") return false;
    if (relative.find('/', at) == std::string_view::npos) break;
  }
  return is_cxx_translation_unit(relative) || is_cuda_translation_unit(relative) || is_source_header(relative);
}

/// A candidate's files, by path relative to the candidate directory.
struct CandidateSources {
  std::map<std::string, std::string> files;
  /// Entries present but not taken, each with the reason ("symbolic link", "not a
  /// source file", ...), so that a model can be told why a file was ignored.
  std::vector<std::pair<std::string, std::string>> skipped;
};

/// Reads `model_new.py` and the sources under `kernels/` of `directory`. Missing parts
/// are simply absent; a symbolic link is skipped and reported, never followed.
/// Throws std::runtime_error when a limit is exceeded or `directory` is unreadable.
[[nodiscard]] inline CandidateSources read_candidate_sources(const std::filesystem::path& directory,
                                                             const detail::TreeReadLimits& limits = {}) {
  CandidateSources sources;
  if (auto model =
          detail::read_regular_file_without_following_links(directory / candidate_model_file, limits.max_file_bytes))
    sources.files.emplace(std::string(candidate_model_file), std::move(*model));
  const std::filesystem::path kernels = directory / candidate_kernels_directory;
  std::error_code ignored;
  if (std::filesystem::is_symlink(kernels, ignored)) {
    sources.skipped.emplace_back(std::string(candidate_kernels_directory), "symbolic link");
    return sources;
  }
  if (!std::filesystem::is_directory(kernels, ignored)) return sources;
  const std::string prefix = std::string(candidate_kernels_directory) + "/";
  detail::TreeContents tree = detail::read_tree_without_following_links(
      kernels, [&](const std::string& relative) { return is_candidate_source_path(prefix + relative); }, limits);
  for (auto& [relative, content] : tree.files) sources.files.emplace(prefix + relative, std::move(content));
  for (auto& [relative, reason] : tree.skipped) sources.skipped.emplace_back(prefix + relative, std::move(reason));
  return sources;
}

/// Writes `files` (relative paths) below `directory`, creating folders as needed.
/// Paths that would leave `directory` are refused.
inline void write_candidate_sources(const std::map<std::string, std::string>& files,
                                    const std::filesystem::path& directory) {
  for (const auto& [relative, content] : files) {
    const std::filesystem::path normal = std::filesystem::path(relative).lexically_normal();
    if (normal.empty() || normal.is_absolute() || *normal.begin() == "..")
      throw std::runtime_error("refusing to write candidate file '" + relative + "' outside " + directory.string());
    detail::write_file_atomically(directory / normal, content);
  }
}

}  // namespace cuda_agent
