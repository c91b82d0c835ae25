// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Write tool (Claude Code's contract): `file_path`, `content`. Creates or replaces a
/// whole file, atomically; an existing file must have been read first.

#include <cstdint>      // uint64_t
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move

#include <nlohmann/json.hpp>

#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent {

struct WriteOptions {
  /// Larger contents are refused.
  std::uint64_t max_content_bytes = 16ull * 1024 * 1024;
  PathResolution resolution = PathResolution::automatic;
};

/// Writes a whole file in the workspace.
class WriteTool {
 public:
  explicit WriteTool(WriteOptions options = {}) : options_(options) {}

  [[nodiscard]] std::string_view name() const noexcept { return "Write"; }
  [[nodiscard]] std::string_view description() const noexcept {
    return "Writes a file in the workspace, replacing it if it exists.\n\n"
           "Usage:\n"
           "- file_path may be absolute or relative to the workspace root; it must lie inside the workspace. Missing "
           "parent directories are created.\n"
           "- If the file already exists, you must Read it first (this tool fails otherwise), and it must not have "
           "changed since you read it.\n"
           "- The content replaces the whole file. To change part of an existing file, prefer Edit or MultiEdit: they "
           "send only the changed text.\n"
           "- Protected files of the task (such as the reference model) cannot be written.\n"
           "- The file is written atomically: other processes see the old or the new file, never a part.";
  }
  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"},
            {"properties",
             {{"file_path", detail::file_path_property("write")},
              {"content", detail::property("string", "The complete content of the file.")}}},
            {"required", {"file_path", "content"}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return write(arguments, context); });
  }

 private:
  ToolResult write(const nlohmann::json& arguments, ToolContext& context) const {
    using detail::ToolFailure;
    const std::string& content = arguments.at("content").get_ref<const std::string&>();
    if (content.size() > options_.max_content_bytes)
      throw ToolFailure("The content is " + detail::format_size(content.size()) + "; Write accepts at most " +
                        detail::format_size(options_.max_content_bytes) + ".");
    const detail::WorkspaceFiles files(context, options_.resolution);
    const std::string relative = files.relative(detail::string_argument(arguments, "file_path"));
    const std::string shown = files.absolute(relative);

    const detail::BeneathEntry entry = files.parent_for_writing(relative);
    files.require_writable(relative, entry);
    const std::optional<struct stat> existing = files.existing_regular_file(entry, relative);
    if (existing) files.require_fresh_read(context, relative, *existing);

    const struct stat written =
        detail::replace_file_atomically(files.root(), entry, content, existing ? &*existing : nullptr, shown);
    detail::WorkspaceFiles::remember_read(context, shown, written);

    const std::size_t lines = detail::count_lines(content);
    nlohmann::json metadata = {{"path", shown}, {"bytes", content.size()}, {"lines", lines}, {"created", !existing}};
    if (!existing) return ToolResult::success("File created successfully at: " + shown, std::move(metadata));
    return ToolResult::success("The file " + shown + " has been updated (" + std::to_string(lines) +
                                   (lines == 1 ? " line, " : " lines, ") + detail::format_size(content.size()) + ").",
                               std::move(metadata));
  }

  WriteOptions options_;
};

static_assert(Tool<WriteTool>);

}  // namespace cuda_agent
