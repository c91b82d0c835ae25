// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The MultiEdit tool (Claude Code's contract): `file_path`, `edits` (each `old_string`,
/// `new_string`, `replace_all`). The edits apply in order, each to the result of the one
/// before, and atomically: if any fails, the file is left as it was.

#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/text_edit.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"
#include "cuda_agent/tools/edit.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent {

using MultiEditOptions = EditOptions;

/// Applies several exact string replacements to one file, all or none.
class MultiEditTool {
 public:
  explicit MultiEditTool(MultiEditOptions options = {}) : options_(options) {}

  [[nodiscard]] std::string_view name() const noexcept { return "MultiEdit"; }
  [[nodiscard]] std::string_view description() const noexcept {
    return "Makes several exact string replacements in one file in a single call. Prefer it to Edit when you "
           "change several places of the same file.\n\n"
           "Usage:\n"
           "- Each edit has old_string, new_string and optionally replace_all, with the same rules as Edit: "
           "old_string must match the file's text exactly (without Read's line-number prefix) and be unique unless "
           "replace_all is true, and new_string must differ from it.\n"
           "- The edits are applied in order, each to the result of the previous one: an edit must match the text "
           "as the earlier edits left it.\n"
           "- All or nothing: if any edit fails, none is applied and the file is unchanged; the error says which "
           "edit failed and why.\n"
           "- You must Read the file first (unless you create it), and it must not have changed since.\n"
           "- To create a file, give a first edit with an empty old_string and the file's content as new_string.\n"
           "- file_path may be absolute or relative to the workspace root; protected files of the task cannot be "
           "edited.";
  }
  [[nodiscard]] nlohmann::json parameters() const {
    const nlohmann::json edit = {{"type", "object"},
                                 {"properties", detail::replacement_properties()},
                                 {"required", {"old_string", "new_string"}},
                                 {"additionalProperties", false}};
    return {{"type", "object"},
            {"properties",
             {{"file_path", detail::file_path_property("modify")},
              {"edits",
               {{"type", "array"},
                {"minItems", 1},
                {"items", edit},
                {"description", "The edits, applied in this order, all or none."}}}}},
            {"required", {"file_path", "edits"}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return apply(arguments, context); });
  }

 private:
  struct Edit {
    std::string old_string;
    std::string new_string;
    bool replace_all = false;
  };

  ToolResult apply(const nlohmann::json& arguments, ToolContext& context) const {
    using detail::ToolFailure;
    std::vector<Edit> edits;
    for (const nlohmann::json& each : arguments.at("edits"))
      edits.push_back({detail::string_argument(each, "old_string"), detail::string_argument(each, "new_string"),
                       detail::bool_argument(each, "replace_all", false)});
    const std::string count = std::to_string(edits.size());
    const auto failed = [&](std::size_t index, const std::string& why) {
      return ToolFailure("Edit " + std::to_string(index + 1) + " of " + count + " failed: " + why +
                         "\nNo edits were applied: MultiEdit applies all edits or none. Fix this edit and send all of "
                         "them again.");
    };
    for (std::size_t i = 0; i < edits.size(); ++i) {
      if (edits[i].old_string == edits[i].new_string)
        throw failed(i, "No changes to make: old_string and new_string are exactly the same.");
      if (i > 0 && edits[i].old_string.empty())
        throw failed(i, "old_string is empty. Only the first edit may have an empty old_string (to create the file).");
    }

    const detail::WorkspaceFiles files(context, options_.resolution);
    const bool creates = edits.front().old_string.empty();
    const detail::EditTarget target = detail::load_edit_target(
        files, context, detail::string_argument(arguments, "file_path"), creates, options_.max_file_bytes);

    std::string content = target.content;
    std::string summary = "Applied " + count + (edits.size() == 1 ? " edit" : " edits") + " to " + target.shown + ":";
    std::size_t replacements = 0;
    for (std::size_t i = 0; i < edits.size(); ++i) {
      const Edit& edit = edits[i];
      if (edit.old_string.empty()) {
        if (!content.empty()) throw failed(i, detail::cannot_create_existing(target.shown));
        content = edit.new_string;
        summary += "\n" + std::to_string(i + 1) + ". Created the file with \"" +
                   detail::one_line_preview(edit.new_string, 60) + "\"";
        continue;
      }
      try {
        detail::TextEdit applied =
            detail::replace_text(content, edit.old_string, edit.new_string, edit.replace_all, target.shown);
        content = std::move(applied.content);
        replacements += applied.replacements;
        summary += "\n" + std::to_string(i + 1) + ". Replaced \"" + detail::one_line_preview(edit.old_string, 60) +
                   "\" with \"" + detail::one_line_preview(edit.new_string, 60) + "\"";
        if (applied.replacements > 1) summary += " (" + std::to_string(applied.replacements) + " occurrences)";
      } catch (const ToolFailure& failure) {
        throw failed(i, failure.what());
      }
    }
    summary += "\n";
    return detail::commit_edit(files, context, target, content, std::move(summary), options_.snippet_context_lines,
                               {{"edits", edits.size()}, {"replacements", replacements}});
  }

  MultiEditOptions options_;
};

static_assert(Tool<MultiEditTool>);

}  // namespace cuda_agent
