// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Exact string replacement as the Edit and MultiEdit tools apply it, with failures that
/// tell the model where to look (the lines of every occurrence, near misses that differ
/// only in whitespace or carry Read's line-number prefix) and a `cat -n` snippet of the
/// changed region after success.

#include <algorithm>    // min, max
#include <cstddef>      // size_t
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <vector>       // vector

#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/tool_failure.hpp"

namespace cuda_agent::detail {

/// Byte offsets where `needle` occurs in `haystack`, left to right, not overlapping.
[[nodiscard]] inline std::vector<std::size_t> occurrences(std::string_view haystack, std::string_view needle) {
  std::vector<std::size_t> found;
  if (needle.empty()) return found;
  for (std::size_t at = haystack.find(needle); at != std::string_view::npos;
       at = haystack.find(needle, at + needle.size()))
    found.push_back(at);
  return found;
}

/// Each line trimmed, inner runs of blanks collapsed, carriage returns dropped; the
/// number of lines is unchanged, so offsets map back to line numbers.
[[nodiscard]] inline std::string normalize_whitespace(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_blank = false;
  bool line_start = true;
  for (const char c : text) {
    if (c == '\r') continue;
    if (c == '\n') {
      out += '\n';
      pending_blank = false;
      line_start = true;
      continue;
    }
    if (c == ' ' || c == '\t') {
      pending_blank = !line_start;
      continue;
    }
    if (pending_blank) out += ' ';
    pending_blank = false;
    line_start = false;
    out += c;
  }
  return out;
}

/// `text` without the "     12\t" prefixes that Read puts before each line, if every
/// non-empty line carries one; empty otherwise.
[[nodiscard]] inline std::string without_line_number_prefixes(std::string_view text) {
  std::string out;
  bool any = false;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty()) {
      std::size_t i = 0;
      while (i < line.size() && line[i] == ' ') ++i;
      const std::size_t digits_start = i;
      while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
      if (i == digits_start) return {};
      if (i < line.size() && line[i] == '\t')
        ++i;
      else if (line.substr(i).starts_with("\xE2\x86\x92"))
        i += 3;  // the arrow some Read outputs use
      else
        return {};
      line.remove_prefix(i);
      any = true;
    }
    out.append(line);
    if (end == text.size()) break;
    out += '\n';
    start = end + 1;
  }
  return any ? out : std::string();
}

/// Why `old_string` is not in `content`, with what would help the model fix it.
[[nodiscard]] inline std::string describe_missing_string(std::string_view content, std::string_view old_string,
                                                         std::string_view shown) {
  std::string message =
      "String to replace not found in " + std::string(shown) + ".\nString: " + one_line_preview(old_string, 300);

  if (const std::string stripped = without_line_number_prefixes(old_string); !stripped.empty()) {
    message +=
        "\nHint: old_string includes the line-number prefixes that Read puts before each line (spaces, the "
        "number, a tab). Give only the file's text, as it appears after the tab.";
    if (const std::size_t at = content.find(stripped); at != std::string_view::npos)
      message += " Without them it matches at line " + std::to_string(line_number_at(content, at)) + ".";
    return message;
  }

  const std::string normal_content = normalize_whitespace(content);
  const std::string normal_old = normalize_whitespace(old_string);
  if (!normal_old.empty() && normal_old.find_first_not_of(" \n") != std::string::npos) {
    const std::vector<std::size_t> near = occurrences(normal_content, normal_old);
    if (!near.empty()) {
      std::vector<std::size_t> lines;
      lines.reserve(near.size());
      for (const std::size_t at : near) lines.push_back(line_number_at(normal_content, at));
      message +=
          "\nHint: text that differs only in whitespace (indentation, tabs, trailing spaces or line endings) "
          "starts at line" +
          std::string(lines.size() > 1 ? "s " : " ") + list_line_numbers(lines, 5) +
          ". Copy old_string exactly as Read shows it, including indentation.";
      return message;
    }
  }

  // The first substantial line is there, but what follows differs: point at it.
  std::size_t start = 0;
  while (start < old_string.size()) {
    std::size_t end = old_string.find('\n', start);
    if (end == std::string_view::npos) end = old_string.size();
    std::string_view line = old_string.substr(start, end - start);
    const std::size_t first = line.find_first_not_of(" \t");
    const std::size_t last = line.find_last_not_of(" \t\r");
    if (first != std::string_view::npos && last - first + 1 >= 6) {
      line = line.substr(first, last - first + 1);
      std::vector<std::size_t> lines;
      for (const std::size_t at : occurrences(content, line)) lines.push_back(line_number_at(content, at));
      if (!lines.empty() && end < old_string.size())
        message += "\nHint: its first line \"" + one_line_preview(line, 80) + "\" appears at line" +
                   std::string(lines.size() > 1 ? "s " : " ") + list_line_numbers(lines, 5) +
                   ", but the lines after it differ. Read the file again around there and copy the text exactly.";
      else if (lines.empty())
        message += "\nHint: not even its first line \"" + one_line_preview(line, 80) +
                   "\" is in the file. Read the file again to see its current content.";
      break;
    }
    start = end + 1;
  }
  return message;
}

/// The result of replacing text.
struct TextEdit {
  std::string content;
  std::size_t replacements = 0;
};

/// Replaces `old_string` by `new_string` in `content`: exactly one occurrence, or all
/// of them with `replace_all`. Throws ToolFailure (see describe_missing_string) when
/// there is none, or when there are several and `replace_all` is false.
[[nodiscard]] inline TextEdit replace_text(std::string_view content, std::string_view old_string,
                                           std::string_view new_string, bool replace_all, std::string_view shown) {
  const std::vector<std::size_t> found = occurrences(content, old_string);
  if (found.empty()) throw ToolFailure(describe_missing_string(content, old_string, shown));
  if (found.size() > 1 && !replace_all) {
    std::vector<std::size_t> lines;
    lines.reserve(found.size());
    for (const std::size_t at : found) lines.push_back(line_number_at(content, at));
    throw ToolFailure("Found " + std::to_string(found.size()) + " matches of the string to replace (at lines " +
                      list_line_numbers(lines) + " of " + std::string(shown) +
                      "), but replace_all is false. To replace all occurrences, set replace_all to true. To replace "
                      "only one, add surrounding lines to old_string so that it matches exactly one place.\nString: " +
                      one_line_preview(old_string, 300));
  }
  TextEdit edit;
  edit.content.reserve(content.size() + found.size() * new_string.size());
  std::size_t copied = 0;
  for (const std::size_t at : found) {
    edit.content.append(content.substr(copied, at - copied));
    edit.content.append(new_string);
    copied = at + old_string.size();
  }
  edit.content.append(content.substr(copied));
  edit.replacements = found.size();
  return edit;
}

/// A `cat -n` excerpt of `after` around the lines that differ from `before`, with
/// `context` lines either side and at most `max_lines` lines.
[[nodiscard]] inline std::string change_snippet(std::string_view before, std::string_view after,
                                                std::size_t context = 4, std::size_t max_lines = 60) {
  const auto split = [](std::string_view text) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      lines.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return lines;
  };
  const std::vector<std::string_view> old_lines = split(before);
  const std::vector<std::string_view> new_lines = split(after);
  if (new_lines.empty()) return {};
  std::size_t prefix = 0;
  while (prefix < old_lines.size() && prefix < new_lines.size() && old_lines[prefix] == new_lines[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < old_lines.size() - prefix && suffix < new_lines.size() - prefix &&
         old_lines[old_lines.size() - 1 - suffix] == new_lines[new_lines.size() - 1 - suffix])
    ++suffix;
  // Changed lines of `after`, 1-based: [prefix + 1, new_lines.size() - suffix].
  const std::size_t changed_first = prefix + 1;
  const std::size_t changed_last = std::max(changed_first, new_lines.size() - suffix);
  const std::size_t first = changed_first > context ? changed_first - context : 1;
  std::size_t last = std::min(new_lines.size(), changed_last + context);
  std::string snippet;
  const bool shortened = last - first + 1 > max_lines;
  if (shortened) last = first + max_lines - 1;
  for (std::size_t line = first; line <= last; ++line) append_numbered_line(snippet, line, new_lines[line - 1]);
  if (shortened)
    snippet +=
        "[... the change continues to line " + std::to_string(changed_last) + "; Read the file to see all of it ...]\n";
  return snippet;
}

}  // namespace cuda_agent::detail
