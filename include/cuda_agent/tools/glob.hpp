// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Glob tool (Claude Code's contract): `pattern`, `path`. Lists the workspace's files
/// whose path matches a glob pattern, newest first.

#include <algorithm>    // sort
#include <chrono>       // seconds, steady_clock
#include <cstddef>      // size_t
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <fcntl.h>     // O_PATH
#include <sys/stat.h>  // fstat

#include <nlohmann/json.hpp>

#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/confined_fs.hpp"
#include "cuda_agent/tools/detail/glob_match.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent {

struct GlobOptions {
  /// Paths listed at most; the rest are counted.
  std::size_t max_results = 100;
  /// Directory entries visited at most.
  std::size_t max_entries = 200'000;
  std::chrono::milliseconds time_budget{20'000};
  PathResolution resolution = PathResolution::automatic;
};

namespace detail {

/// The directory to search (workspace-relative) given a `path` argument; it must exist
/// and be a directory.
inline std::string search_directory(const WorkspaceFiles& files, const nlohmann::json& arguments) {
  const std::string given = string_argument(arguments, "path");
  std::string relative = given.empty() ? std::string() : files.relative(given, "path");
  UniqueFd fd;
  if (const int error = files.root().try_open(relative, O_PATH, true, fd); error != 0)
    throw ToolFailure(error == ENOENT ? "Path does not exist: " + shown_path(files.absolute(relative)) + "."
                                      : describe_path_error(error, files.absolute(relative)));
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) throw ToolFailure(describe_path_error(errno, files.absolute(relative)));
  if (!S_ISDIR(status.st_mode))
    throw ToolFailure(shown_path(files.absolute(relative)) +
                      " is not a directory; path must be a directory to search in.");
  return relative;
}

/// `relative` (inside the workspace) as seen from the directory `base`.
inline std::string_view relative_to(std::string_view relative, std::string_view base) {
  if (base.empty()) return relative;
  return relative.substr(base.size() + 1);
}

}  // namespace detail

/// Finds files by name pattern.
class GlobTool {
 public:
  explicit GlobTool(GlobOptions options = {}) : options_(options) {
    description_ =
        "Fast file pattern matching in the workspace.\n\n"
        "Usage:\n"
        "- Supports glob patterns like \"**/*.cu\", \"kernels/*.{cu,cuh}\" or \"*.py\": `*` matches within one "
        "directory level, `**` matches any number of directories, `?` one character, `[abc]` a class, `{a,b}` "
        "alternatives. The pattern is matched against paths relative to the directory searched, so \"*.py\" finds "
        "only files directly in it; use \"**/*.py\" to search all subdirectories.\n"
        "- Returns absolute paths of matching files, sorted by modification time (newest first), at most " +
        std::to_string(options_.max_results) +
        ".\n"
        "- path is the directory to search (absolute, or relative to the workspace root); it defaults to the "
        "workspace root.\n"
        "- Hidden files and directories (names starting with '.') are skipped unless the pattern names them "
        "explicitly; symbolic links are not followed.\n"
        "- To search file contents, use Grep.";
  }

  [[nodiscard]] std::string_view name() const noexcept { return "Glob"; }
  [[nodiscard]] std::string_view description() const noexcept { return description_; }
  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"},
            {"properties",
             {{"pattern",
               {{"type", "string"},
                {"minLength", 1},
                {"description", "The glob pattern to match files against, e.g. \"**/*.cu\"."}}},
              {"path", detail::property("string",
                                        "The directory to search in (absolute, or relative to the workspace root). "
                                        "Omit it to search the workspace root.")}}},
            {"required", {"pattern"}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return glob(arguments, context); });
  }

 private:
  ToolResult glob(const nlohmann::json& arguments, ToolContext& context) const {
    using detail::ToolFailure;
    const detail::WorkspaceFiles files(context, options_.resolution);
    std::string base = detail::search_directory(files, arguments);
    std::string pattern = detail::string_argument(arguments, "pattern");

    // An absolute pattern is taken apart: its directory part must lie in the workspace.
    if (pattern.front() == '/') {
      const std::string root = files.root().path().string();
      if (!pattern.starts_with(root + "/"))
        throw ToolFailure("The pattern " + detail::shown_path(pattern) + " is outside the workspace " + root +
                          ". Use a pattern relative to the workspace (or to path), such as \"**/*.cu\".");
      pattern.erase(0, root.size() + 1);
      base.clear();
    }
    while (pattern.starts_with("./")) pattern.erase(0, 2);
    for (const std::string& part : detail::path_components(pattern))
      if (part == "..")
        throw ToolFailure("The pattern may not contain '..'; give the directory to search as path instead.");
    if (pattern.empty()) throw ToolFailure("The pattern is empty; use \"*\" to match every file of a directory.");

    const detail::GlobPattern matcher(pattern);
    detail::ListOptions list;
    list.include_hidden = pattern.front() == '.' || pattern.find("/.") != std::string::npos;
    list.max_entries = options_.max_entries;
    list.cancellation = context.cancellation();
    list.deadline = std::chrono::steady_clock::now() + options_.time_budget;
    detail::FileListing listing = detail::list_files(files.root(), base, list);

    std::vector<detail::ListedFile> matches;
    std::size_t deeper_matches = 0;  // what "**/" + pattern would have found
    const detail::GlobPattern anywhere(matcher.has_slash() ? std::string() : "**/" + pattern);
    for (detail::ListedFile& file : listing.files) {
      const std::string_view inside = detail::relative_to(file.relative, base);
      if (matcher.matches(inside))
        matches.push_back(std::move(file));
      else if (!matcher.has_slash() && anywhere.matches(inside))
        ++deeper_matches;
    }
    std::sort(matches.begin(), matches.end(), [](const detail::ListedFile& a, const detail::ListedFile& b) {
      return a.modified != b.modified ? a.modified > b.modified : a.relative < b.relative;
    });

    nlohmann::json metadata = {{"matches", matches.size()}, {"directory", files.absolute(base)}};
    std::string output;
    if (matches.empty()) {
      output = "No files found";
      if (deeper_matches > 0)
        output += ". (\"" + pattern + "\" matches only directly inside " + files.absolute(base) + "; " +
                  std::to_string(deeper_matches) + " file" + (deeper_matches == 1 ? "" : "s") +
                  " in subdirectories would match \"**/" + pattern + "\".)";
    }
    for (std::size_t i = 0; i < matches.size() && i < options_.max_results; ++i)
      output += (i == 0 ? "" : "\n") + detail::sanitize_utf8(files.absolute(matches[i].relative));
    if (matches.size() > options_.max_results)
      output += "\n(Results are truncated: showing " + std::to_string(options_.max_results) + " of " +
                std::to_string(matches.size()) + " files. Consider using a more specific path or pattern.)";
    if (listing.incomplete)
      output += "\n(The search stopped early (" + listing.incomplete_reason +
                "); results may be incomplete. Search a narrower path.)";
    metadata["truncated"] = matches.size() > options_.max_results || listing.incomplete;
    return ToolResult::success(std::move(output), std::move(metadata));
  }

  GlobOptions options_;
  std::string description_;
};

static_assert(Tool<GlobTool>);

}  // namespace cuda_agent
