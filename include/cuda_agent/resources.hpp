// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Files the library carries inside itself: the Python evaluation harness, the default
/// SKILL.md, candidate starters, and the demo task and trajectory. Writing them out is
/// how a workspace or an evaluation directory gets its trusted copies.

#include <filesystem>   // path, create_directories
#include <fstream>      // ofstream
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include "cuda_agent/detail/embedded_resources.hpp"

namespace cuda_agent {

/// The embedded file at `path` (relative to the resources folder, '/'-separated).
[[nodiscard]] inline std::optional<std::string_view> embedded_resource(std::string_view path) noexcept {
  for (const detail::EmbeddedFile& file : detail::embedded_files)
    if (file.path == path) return file.content;
  return std::nullopt;
}

/// Paths of the embedded files under `prefix` (a folder such as "harness/").
[[nodiscard]] inline std::vector<std::string_view> embedded_resources_under(std::string_view prefix) {
  std::vector<std::string_view> paths;
  for (const detail::EmbeddedFile& file : detail::embedded_files)
    if (file.path.substr(0, prefix.size()) == prefix) paths.push_back(file.path);
  return paths;
}

/// Writes the embedded files under `prefix` into `destination`, keeping their relative
/// layout below the prefix. Returns the files written.
inline std::vector<std::filesystem::path> write_embedded_resources(std::string_view prefix,
                                                                   const std::filesystem::path& destination) {
  std::vector<std::filesystem::path> written;
  for (const detail::EmbeddedFile& file : detail::embedded_files) {
    if (file.path.substr(0, prefix.size()) != prefix) continue;
    const std::filesystem::path target = destination / std::filesystem::path(file.path.substr(prefix.size()));
    std::filesystem::create_directories(target.parent_path());
    std::ofstream stream(target, std::ios::binary | std::ios::trunc);
    stream.write(file.content.data(), static_cast<std::streamsize>(file.content.size()));
    if (!stream) throw std::runtime_error("cannot write " + target.string());
    written.push_back(target);
  }
  return written;
}

}  // namespace cuda_agent
