// SPDX-License-Identifier: Apache-2.0
#pragma once

/// What the shipped tools share: argument validation at the boundary, typed access to
/// validated arguments, and (for file tools) the workspace, protected paths and the
/// read-before-write rule of one invocation.

#include <algorithm>    // min, sort
#include <cstdint>      // int64_t
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <dirent.h>    // fdopendir, readdir
#include <fcntl.h>     // O_*
#include <sys/stat.h>  // struct stat, fstatat

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/json_schema.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/confined_fs.hpp"
#include "cuda_agent/tools/detail/tool_failure.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent::detail {

/// Validates `arguments` against `schema`, then runs `body`; a ToolFailure it throws
/// becomes an error result with its message.
template <class Body>
[[nodiscard]] ToolResult guarded_invoke(std::string_view tool, const nlohmann::json& schema,
                                        const nlohmann::json& arguments, Body&& body) {
  if (std::string problem = describe_argument_errors(tool, schema, arguments); !problem.empty())
    return ToolResult::error(std::move(problem), {{"invalid_arguments", true}});
  try {
    return body();
  } catch (const ToolFailure& failure) {
    return ToolResult::error(std::string("Error: ") + failure.what());
  }
}

// Accessors for arguments that already passed validation; null means absent.
[[nodiscard]] inline const nlohmann::json* argument(const nlohmann::json& arguments, const char* name) {
  const auto found = arguments.find(name);
  return found == arguments.end() || found->is_null() ? nullptr : &*found;
}
[[nodiscard]] inline std::string string_argument(const nlohmann::json& arguments, const char* name,
                                                 std::string fallback = {}) {
  const nlohmann::json* value = argument(arguments, name);
  return value ? value->get<std::string>() : std::move(fallback);
}
[[nodiscard]] inline std::optional<std::int64_t> integer_argument(const nlohmann::json& arguments, const char* name) {
  const nlohmann::json* value = argument(arguments, name);
  if (!value) return std::nullopt;
  if (value->is_number_float()) return static_cast<std::int64_t>(value->get<double>());
  return value->get<std::int64_t>();
}
[[nodiscard]] inline bool bool_argument(const nlohmann::json& arguments, const char* name, bool fallback) {
  const nlohmann::json* value = argument(arguments, name);
  return value ? value->get<bool>() : fallback;
}

/// A JSON-Schema property with a description.
[[nodiscard]] inline nlohmann::json property(const char* type, const char* description) {
  return {{"type", type}, {"description", description}};
}

/// The `file_path` parameter of the file tools; `purpose` completes "The file to ...".
[[nodiscard]] inline nlohmann::json file_path_property(const std::string& purpose) {
  return {{"type", "string"},
          {"minLength", 1},
          {"description", "The file to " + purpose +
                              ": an absolute path inside the workspace, or a path relative to the workspace root."}};
}

/// Levenshtein distance, bounded: anything above `limit` is reported as limit + 1.
[[nodiscard]] inline std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit) {
  if (a.size() > b.size() + limit || b.size() > a.size() + limit) return limit + 1;
  std::vector<std::size_t> previous(b.size() + 1);
  std::vector<std::size_t> current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    previous.swap(current);
  }
  return std::min(previous[b.size()], limit + 1);
}

[[nodiscard]] inline std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return out;
}

/// The workspace as one file-tool invocation sees it.
class WorkspaceFiles {
 public:
  WorkspaceFiles(const ToolContext& context, PathResolution resolution)
      : root_(context.workspace(), resolution), protected_paths_(root_, context.protected_paths()) {}
  WorkspaceFiles(const WorkspaceFiles&) = delete;
  WorkspaceFiles& operator=(const WorkspaceFiles&) = delete;

  [[nodiscard]] const ConfinedRoot& root() const noexcept { return root_; }

  /// The workspace-relative form of a path argument (see ConfinedRoot::relative).
  [[nodiscard]] std::string relative(std::string_view text, std::string_view parameter = "file_path") const {
    return root_.relative(text, parameter);
  }
  [[nodiscard]] std::string absolute(std::string_view relative_path) const { return root_.absolute(relative_path); }

  /// Refuses paths that name a protected path or lie inside one (checked before anything
  /// is created on the way to them).
  void require_writable(const std::string& relative_path) const {
    if (auto covering = protected_paths_.covering(relative_path, -1, {})) refuse(relative_path, *covering);
  }

  /// Refuses an entry that is, or lies in, a protected path, by name or by identity.
  void require_writable(const std::string& relative_path, const BeneathEntry& entry) const {
    if (auto covering = protected_paths_.covering(relative_path, entry.directory.get(), entry.name))
      refuse(relative_path, *covering);
  }

  /// The directory that will hold `relative_path` and the entry's name there; missing
  /// directories are created (never inside a protected one).
  [[nodiscard]] BeneathEntry parent_for_writing(const std::string& relative_path) const {
    require_writable(relative_path);
    return root_.parent_of(relative_path, true, [&](int directory) {
      if (auto covering = protected_paths_.covering_directory(directory)) refuse(relative_path, *covering);
    });
  }

  /// The status of the entry without following a link; nullopt if it does not exist.
  /// Refuses links, directories and special files: only regular files are written.
  [[nodiscard]] std::optional<struct stat> existing_regular_file(const BeneathEntry& entry,
                                                                 const std::string& relative_path) const {
    struct stat status {};
    if (::fstatat(entry.directory.get(), entry.name.c_str(), &status, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return std::nullopt;
      throw ToolFailure(describe_path_error(errno, absolute(relative_path)));
    }
    if (S_ISLNK(status.st_mode)) {
      char target[4096];
      const ssize_t length = ::readlinkat(entry.directory.get(), entry.name.c_str(), target, sizeof target - 1);
      const std::string shown = length > 0 ? std::string(target, static_cast<std::size_t>(length)) : std::string("?");
      throw ToolFailure(shown_path(absolute(relative_path)) + " is a symbolic link (to " + shown_path(shown) +
                        "); write or edit the file it points to instead.");
    }
    if (S_ISDIR(status.st_mode))
      throw ToolFailure(shown_path(absolute(relative_path)) + " is a directory, not a file.");
    if (!S_ISREG(status.st_mode))
      throw ToolFailure(shown_path(absolute(relative_path)) + " is not a regular file (it is a " + file_kind(status) +
                        ").");
    return status;
  }

  /// Opens an entry found by parent_of for reading, without following a link.
  [[nodiscard]] UniqueFd open_entry(const BeneathEntry& entry, const std::string& relative_path) const {
    const int fd = ::openat(entry.directory.get(), entry.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw ToolFailure(describe_path_error(errno, absolute(relative_path)));
    return UniqueFd(fd);
  }

  /// "X does not exist." with what the model may have meant.
  [[nodiscard]] std::string missing_file_message(const std::string& relative_path, std::string_view as_given) const {
    std::string message = "File does not exist: " + shown_path(absolute(relative_path)) + ".";
    const std::size_t slash = relative_path.rfind('/');
    const std::string directory = slash == std::string::npos ? std::string() : relative_path.substr(0, slash);
    const std::string name = slash == std::string::npos ? relative_path : relative_path.substr(slash + 1);
    UniqueFd fd;
    if (root_.try_open(directory, O_RDONLY | O_DIRECTORY, true, fd) != 0) {
      message += " Its directory " + shown_path(absolute(directory)) + " does not exist either.";
    } else if (const std::vector<std::string> similar = similar_names(std::move(fd), name); !similar.empty()) {
      message += " Did you mean ";
      for (std::size_t i = 0; i < similar.size(); ++i)
        message += (i == 0                    ? ""
                    : i + 1 == similar.size() ? " or "
                                              : ", ") +
                   shown_path(absolute(directory.empty() ? similar[i] : directory + "/" + similar[i]));
      message += "?";
    }
    if (!as_given.empty() && as_given.front() != '/')
      message += " (Relative paths are resolved against the workspace " + root_.path().string() + ".)";
    return message;
  }

  /// Write and Edit change a file only after the model has seen its current content.
  void require_fresh_read(const ToolContext& context, const std::string& relative_path,
                          const struct stat& status) const {
    const std::string key = absolute(relative_path);
    const auto* seen = context.read_time(key);
    if (seen == nullptr)
      throw ToolFailure("File has not been read yet: " + shown_path(key) +
                        ". Read it first with the Read tool before writing to it.");
    if (*seen != modification_time(status))
      throw ToolFailure("File has been modified since it was read (by a command or another tool): " + shown_path(key) +
                        ". Read it again before writing to it.");
  }

  static void remember_read(ToolContext& context, const std::string& absolute_path, const struct stat& status) {
    context.record_read(absolute_path, modification_time(status));
  }

  [[nodiscard]] static std::string file_kind(const struct stat& status) {
    if (S_ISFIFO(status.st_mode)) return "named pipe";
    if (S_ISSOCK(status.st_mode)) return "socket";
    if (S_ISCHR(status.st_mode)) return "character device";
    if (S_ISBLK(status.st_mode)) return "block device";
    if (S_ISDIR(status.st_mode)) return "directory";
    return "special file";
  }

 private:
  [[noreturn]] void refuse(const std::string& relative_path, const std::string& covering) const {
    std::string message = shown_path(absolute(relative_path)) + " is protected";
    if (covering != relative_path)
      message += covering.empty() ? " (the whole workspace is read-only)"
                                  : " (it is, or lies in, " + shown_path(absolute(covering)) + ")";
    message +=
        ": it is read-only for this task. It can be read, but not written, edited or replaced; make your "
        "changes in other files.";
    throw ToolFailure(message);
  }

  static std::vector<std::string> similar_names(UniqueFd directory_fd, const std::string& name) {
    struct Candidate {
      std::size_t score;
      std::string name;
    };
    std::vector<Candidate> candidates;
    DIR* directory = ::fdopendir(directory_fd.get());
    if (directory == nullptr) return {};
    (void)directory_fd.release();
    const std::string lower = lowercase(name);
    const std::size_t dot = name.rfind('.');
    const std::string stem = dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
    std::size_t scanned = 0;
    while (const dirent* entry = ::readdir(directory)) {
      if (++scanned > 10'000) break;
      const std::string_view other = entry->d_name;
      if (other == "." || other == ".." || other == name) continue;
      std::size_t score;
      if (lowercase(other) == lower)
        score = 0;
      else if (const std::size_t other_dot = other.rfind('.');
               other_dot != std::string_view::npos && other_dot != 0 && other.substr(0, other_dot) == stem)
        score = 1;
      else if (const std::size_t distance = edit_distance(lower, lowercase(other), 2); distance <= 2)
        score = 1 + distance;
      else
        continue;
      candidates.push_back({score, std::string(other)});
    }
    ::closedir(directory);
    std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.score != b.score ? a.score < b.score : a.name < b.name;
    });
    std::vector<std::string> names;
    for (std::size_t i = 0; i < candidates.size() && i < 3; ++i) names.push_back(candidates[i].name);
    return names;
  }

  ConfinedRoot root_;
  ProtectedPaths protected_paths_;
};

}  // namespace cuda_agent::detail
