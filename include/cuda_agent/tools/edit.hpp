// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Edit tool (Claude Code's contract): `file_path`, `old_string`, `new_string`,
/// `replace_all`. Exact string replacement in a file that was read first, failing
/// precisely (naming the lines) when the string is missing or not unique.

#include <cstdint>      // uint64_t
#include <optional>     // optional
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move

#include <fcntl.h>     // O_PATH
#include <sys/stat.h>  // struct stat

#include <nlohmann/json.hpp>

#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/text_edit.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent {

struct EditOptions {
  /// Files larger than this are not edited (use Bash for generated files that big).
  std::uint64_t max_file_bytes = 16ull * 1024 * 1024;
  /// Context lines either side of the change in the snippet shown after an edit.
  std::size_t snippet_context_lines = 4;
  PathResolution resolution = PathResolution::automatic;
};

namespace detail {

/// A file about to be edited: where it is, its status, and its content.
struct EditTarget {
  std::string relative;
  std::string shown;
  BeneathEntry entry;
  std::optional<struct stat> status;  // nullopt: the file does not exist yet
  std::string content;
};

/// Locates and loads the file an edit applies to. With `may_create`, a missing file (and
/// its missing directories) is allowed; otherwise it is an error naming what exists.
inline EditTarget load_edit_target(const WorkspaceFiles& files, const ToolContext& context, std::string_view given,
                                   bool may_create, std::uint64_t max_bytes) {
  EditTarget target;
  target.relative = files.relative(given);
  target.shown = files.absolute(target.relative);
  if (!may_create) {
    UniqueFd probe;
    if (files.root().try_open(target.relative, O_PATH, false, probe) == ENOENT)
      throw ToolFailure(files.missing_file_message(target.relative, given));
  }
  target.entry =
      may_create ? files.parent_for_writing(target.relative) : files.root().parent_of(target.relative, false);
  files.require_writable(target.relative, target.entry);
  target.status = files.existing_regular_file(target.entry, target.relative);
  if (!target.status) {
    if (!may_create) throw ToolFailure(files.missing_file_message(target.relative, given));
    return target;
  }
  files.require_fresh_read(context, target.relative, *target.status);
  const UniqueFd fd = files.open_entry(target.entry, target.relative);
  target.content = read_all(fd.get(), max_bytes, target.shown);
  if (looks_binary(target.content))
    throw ToolFailure(shown_path(target.shown) + " looks like a binary file; only text files can be edited.");
  return target;
}

/// Writes the edited content, records the new state as read, and reports the change.
inline ToolResult commit_edit(const WorkspaceFiles& files, ToolContext& context, const EditTarget& target,
                              const std::string& content, std::string summary, std::size_t context_lines,
                              nlohmann::json metadata) {
  const struct stat written = replace_file_atomically(files.root(), target.entry, content,
                                                      target.status ? &*target.status : nullptr, target.shown);
  WorkspaceFiles::remember_read(context, target.shown, written);
  metadata["path"] = target.shown;
  metadata["created"] = !target.status;
  if (!target.status) return ToolResult::success("File created successfully at: " + target.shown, std::move(metadata));
  summary += " Here's the result of running `cat -n` on a snippet of the edited file:\n";
  summary += change_snippet(target.content, content, context_lines);
  return ToolResult::success(std::move(summary), std::move(metadata));
}

/// old_string, new_string and replace_all: the parameters of one replacement.
[[nodiscard]] inline nlohmann::json replacement_properties() {
  return {{"old_string", property("string", "The exact text to replace.")},
          {"new_string", property("string", "The text to replace it with (must be different from old_string).")},
          {"replace_all",
           {{"type", "boolean"},
            {"default", false},
            {"description", "Replace every occurrence of old_string (default false)."}}}};
}

inline std::string cannot_create_existing(const std::string& shown) {
  return "Cannot create new file - file already exists: " + shown +
         ". An empty old_string creates a file; to change this one, give the text to replace as old_string (or "
         "replace the whole file with Write).";
}

}  // namespace detail

/// Replaces exact text in a file of the workspace.
class EditTool {
 public:
  explicit EditTool(EditOptions options = {}) : options_(options) {}

  [[nodiscard]] std::string_view name() const noexcept { return "Edit"; }
  [[nodiscard]] std::string_view description() const noexcept {
    return "Performs an exact string replacement in a file of the workspace.\n\n"
           "Usage:\n"
           "- You must Read the file before editing it (this tool fails otherwise), and it must not have changed "
           "since (after a command rewrites it, Read it again).\n"
           "- old_string must match the file's text exactly, including indentation and whitespace. Copy it from the "
           "Read output without the line-number prefix (spaces, number, tab): only what follows the tab is file "
           "content.\n"
           "- The edit fails if old_string is not found, or if it occurs more than once and replace_all is false; "
           "the error names the lines. Include enough surrounding lines to make old_string unique, or set "
           "replace_all to replace every occurrence (for example to rename a variable).\n"
           "- new_string must differ from old_string. An empty new_string deletes old_string.\n"
           "- An empty old_string creates a new file with new_string as its content (the file must not exist, or be "
           "empty).\n"
           "- file_path may be absolute or relative to the workspace root; protected files of the task cannot be "
           "edited.\n"
           "- For several changes to one file, MultiEdit applies them in one call.";
  }
  [[nodiscard]] nlohmann::json parameters() const {
    nlohmann::json properties = detail::replacement_properties();
    properties["file_path"] = detail::file_path_property("modify");
    return {{"type", "object"},
            {"properties", std::move(properties)},
            {"required", {"file_path", "old_string", "new_string"}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return edit(arguments, context); });
  }

 private:
  ToolResult edit(const nlohmann::json& arguments, ToolContext& context) const {
    using detail::ToolFailure;
    const std::string old_string = detail::string_argument(arguments, "old_string");
    const std::string new_string = detail::string_argument(arguments, "new_string");
    const bool replace_all = detail::bool_argument(arguments, "replace_all", false);
    if (old_string == new_string)
      throw ToolFailure("No changes to make: old_string and new_string are exactly the same.");

    const detail::WorkspaceFiles files(context, options_.resolution);
    const detail::EditTarget target = detail::load_edit_target(
        files, context, detail::string_argument(arguments, "file_path"), old_string.empty(), options_.max_file_bytes);

    std::string content;
    std::size_t replacements = 1;
    if (old_string.empty()) {
      if (target.status && !target.content.empty()) throw ToolFailure(detail::cannot_create_existing(target.shown));
      content = new_string;
    } else {
      detail::TextEdit edit = detail::replace_text(target.content, old_string, new_string, replace_all, target.shown);
      content = std::move(edit.content);
      replacements = edit.replacements;
    }
    std::string summary = "The file " + target.shown + " has been updated.";
    if (replacements > 1)
      summary = "The file " + target.shown + " has been updated: all " + std::to_string(replacements) +
                " occurrences were replaced.";
    return detail::commit_edit(files, context, target, content, std::move(summary), options_.snippet_context_lines,
                               {{"replacements", replacements}});
  }

  EditOptions options_;
};

static_assert(Tool<EditTool>);

}  // namespace cuda_agent
