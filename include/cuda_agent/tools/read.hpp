// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Read tool (Claude Code's contract): `file_path`, `offset`, `limit`; 2000 lines by
/// default, numbered as `cat -n` numbers them, long lines cut, binary files refused and
/// large files read in parts.

#include <algorithm>    // min
#include <array>        // array
#include <cerrno>       // errno, EINTR
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <cstring>      // memchr
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <fcntl.h>     // O_*
#include <sys/stat.h>  // fstat
#include <unistd.h>    // read, pread

#include <nlohmann/json.hpp>

#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent {

struct ReadOptions {
  /// Lines returned when the call gives no `limit`.
  std::size_t default_line_limit = 2000;
  /// Longer lines are cut to this many characters.
  std::size_t max_line_length = 2000;
  /// Files larger than this are read only in parts (with `offset` or `limit`).
  std::uint64_t max_whole_file_bytes = 256 * 1024;
  /// The numbered text returned by one call stops before it exceeds this.
  std::size_t max_output_bytes = 100'000;
  /// Remaining lines are counted (for "showing lines a-b of n") only up to this much data.
  std::uint64_t max_counted_bytes = 64ull * 1024 * 1024;
  PathResolution resolution = PathResolution::automatic;
};

namespace detail {

/// Reads a file line by line with bounded memory: each line keeps at most `keep` bytes,
/// and its full length is reported.
class LineReader {
 public:
  LineReader(int fd, std::size_t keep) : fd_(fd), keep_(keep) {}

  /// The next line (without its '\n'); false at the end of the file.
  bool next(std::string& line, std::uint64_t& length) {
    line.clear();
    length = 0;
    bool any = false;
    while (true) {
      if (position_ == end_) {
        if (!fill()) return any;
      }
      any = true;
      const char* start = buffer_.data() + position_;
      const auto* newline = static_cast<const char*>(std::memchr(start, '\n', end_ - position_));
      const std::size_t span = newline ? static_cast<std::size_t>(newline - start) : end_ - position_;
      if (line.size() < keep_) line.append(start, std::min(span, keep_ - line.size()));
      length += span;
      position_ += span;
      if (newline) {
        ++position_;
        return true;
      }
    }
  }

  /// Lines left from here, counted without keeping them, up to `max_bytes` read; false
  /// if it gave up.
  bool count_remaining(std::uint64_t max_bytes, std::uint64_t& lines) {
    lines = 0;
    std::uint64_t scanned = 0;
    bool open_line = false;
    while (true) {
      if (position_ == end_) {
        if (!fill()) break;
        scanned += end_;
        if (scanned > max_bytes) return false;
      }
      const char* at = buffer_.data() + position_;
      const char* const stop = buffer_.data() + end_;
      while ((at = static_cast<const char*>(std::memchr(at, '\n', static_cast<std::size_t>(stop - at)))) != nullptr) {
        ++lines;
        ++at;
      }
      open_line = buffer_[end_ - 1] != '\n';
      position_ = end_;
    }
    if (open_line) ++lines;
    return true;
  }

 private:
  bool fill() {
    while (true) {
      const ssize_t n = ::read(fd_, buffer_.data(), buffer_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      position_ = 0;
      end_ = static_cast<std::size_t>(n);
      return true;
    }
  }

  int fd_;
  std::size_t keep_;
  std::array<char, 65536> buffer_{};
  std::size_t position_ = 0;
  std::size_t end_ = 0;
};

/// The byte length of the first `characters` code points of `text`.
inline std::size_t prefix_of_characters(std::string_view text, std::size_t characters) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (count == characters) return i;
    ++count;
  }
  return text.size();
}

}  // namespace detail

/// Reads a text file of the workspace for the model, and records that it did, so that
/// Write and Edit may then change the file.
class ReadTool {
 public:
  explicit ReadTool(ReadOptions options = {}) : options_(options) {
    const std::string lines = std::to_string(options_.default_line_limit);
    description_ =
        "Reads a text file from the workspace and returns its lines numbered like `cat -n` (the line number, "
        "right-aligned, then a tab, then the line).\n\n"
        "Usage:\n"
        "- file_path may be absolute or relative to the workspace root; it must lie inside the workspace.\n"
        "- By default up to " +
        lines +
        " lines are returned, starting at the first. For long files, pass offset (the "
        "1-based line to start at) and limit (how many lines) to read a part; reading the whole file is usually best "
        "when it is small.\n"
        "- Lines longer than " +
        std::to_string(options_.max_line_length) +
        " characters are cut.\n"
        "- Files over " +
        detail::format_size(options_.max_whole_file_bytes) +
        " must be read in parts with offset/limit; use Grep to find the lines you need.\n"
        "- Binary files (object files, libraries, images) are refused; inspect them with Bash.\n"
        "- The line-number prefix is not part of the file: never copy it into Edit's old_string.\n"
        "- Directories cannot be read; list them with Glob or Bash (ls).\n"
        "- A file must have been read with this tool before Write or Edit may change it. You can call several tools "
        "in one response; read several files at once when that helps.";
  }

  [[nodiscard]] std::string_view name() const noexcept { return "Read"; }
  [[nodiscard]] std::string_view description() const noexcept { return description_; }
  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"},
            {"properties",
             {{"file_path", detail::file_path_property("read")},
              {"offset",
               {{"type", "integer"},
                {"minimum", 0},
                {"description",
                 "The line number to start reading from (1-based). Only provide if the "
                 "file is too large to read at once."}}},
              {"limit",
               {{"type", "integer"},
                {"minimum", 1},
                {"description",
                 "The number of lines to read. Only provide if the file is too large to "
                 "read at once."}}}}},
            {"required", {"file_path"}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return read(arguments, context); });
  }

 private:
  ToolResult read(const nlohmann::json& arguments, ToolContext& context) const {
    using detail::ToolFailure;
    const detail::WorkspaceFiles files(context, options_.resolution);
    const std::string given = detail::string_argument(arguments, "file_path");
    const std::string relative = files.relative(given);
    const std::string shown = files.absolute(relative);

    detail::UniqueFd fd;
    if (const int error = files.root().try_open(relative, O_RDONLY | O_NONBLOCK | O_NOCTTY, true, fd); error != 0) {
      if (error == ENOENT) throw ToolFailure(files.missing_file_message(relative, given));
      throw ToolFailure(detail::describe_path_error(error, shown));
    }
    struct stat status {};
    if (::fstat(fd.get(), &status) != 0) throw ToolFailure(detail::describe_path_error(errno, shown));
    if (S_ISDIR(status.st_mode))
      throw ToolFailure(detail::shown_path(shown) +
                        " is a directory, not a file. List its files with Glob (for example pattern \"*\" with this "
                        "path) or with Bash (ls).");
    if (!S_ISREG(status.st_mode))
      throw ToolFailure(detail::shown_path(shown) + " is not a regular file (it is a " +
                        detail::WorkspaceFiles::file_kind(status) + ").");
    const auto size = static_cast<std::uint64_t>(status.st_size);
    nlohmann::json metadata = {{"path", shown}, {"bytes", size}};

    if (size == 0) {
      detail::WorkspaceFiles::remember_read(context, shown, status);
      metadata["lines"] = 0;
      return ToolResult::success(
          "Warning: the file " + detail::shown_path(shown) + " exists but its contents are empty.",
          std::move(metadata));
    }

    std::array<char, 8192> head{};
    const ssize_t head_size = ::pread(fd.get(), head.data(), head.size(), 0);
    if (head_size > 0 && detail::looks_binary(std::string_view(head.data(), static_cast<std::size_t>(head_size))))
      throw ToolFailure(detail::shown_path(shown) + " looks like a binary file (" + detail::format_size(size) +
                        "); Read shows text files only. Inspect it with Bash, for example `file " + shown + "`, `xxd " +
                        shown + " | head`, or `nm -C` / `cuobjdump` for object files.");

    const std::optional<std::int64_t> offset_argument = detail::integer_argument(arguments, "offset");
    const std::optional<std::int64_t> limit_argument = detail::integer_argument(arguments, "limit");
    if (!offset_argument && !limit_argument && size > options_.max_whole_file_bytes) {
      detail::LineReader counter(fd.get(), 0);
      std::uint64_t total = 0;
      const bool counted = counter.count_remaining(options_.max_counted_bytes, total);
      throw ToolFailure(
          "File content (" + detail::format_size(size) +
          (counted ? ", " + std::to_string(total) + " lines" : std::string()) +
          ") exceeds the maximum that Read returns at once (" + detail::format_size(options_.max_whole_file_bytes) +
          "). Read it in parts with offset and limit (for example offset=1, limit=" +
          std::to_string(options_.default_line_limit) + "), or search it with Grep for the lines you need.");
    }

    const std::size_t first = static_cast<std::size_t>(std::max<std::int64_t>(offset_argument.value_or(1), 1));
    const std::size_t limit = limit_argument ? static_cast<std::size_t>(*limit_argument) : options_.default_line_limit;

    detail::LineReader reader(fd.get(), options_.max_line_length * 4 + 4);
    std::string output;
    std::string line;
    std::uint64_t length = 0;
    std::size_t number = 0;
    std::size_t last_shown = 0;
    std::vector<std::size_t> cut_lines;
    bool stopped_for_size = false;
    bool more = false;
    while (reader.next(line, length)) {
      ++number;
      if (number < first) continue;
      if (number - first >= limit) {  // (first + limit could overflow)
        more = true;
        break;
      }
      std::string_view text = line;
      if (length > line.size() || detail::prefix_of_characters(text, options_.max_line_length) < text.size()) {
        text = text.substr(0, detail::prefix_of_characters(text, options_.max_line_length));
        cut_lines.push_back(number);
      }
      const std::size_t before = output.size();
      detail::append_numbered_line(output, number, text);
      if (output.size() > options_.max_output_bytes && last_shown != 0) {
        output.resize(before);
        stopped_for_size = true;
        more = true;
        break;
      }
      last_shown = number;
    }

    std::uint64_t total_lines = number;
    bool total_known = !more;
    if (more) {
      std::uint64_t remaining = 0;
      // The line that stopped the loop was read but not shown; count it and the rest.
      if (reader.count_remaining(options_.max_counted_bytes, remaining)) {
        total_lines = number + remaining;
        total_known = true;
      }
    }

    if (last_shown == 0)
      throw ToolFailure("The file " + detail::shown_path(shown) + " is shorter than the provided offset (" +
                        std::to_string(first) + "): it has " + std::to_string(total_lines) +
                        (total_lines == 1 ? " line." : " lines.") + " Use an offset between 1 and " +
                        std::to_string(total_lines) + ".");
    detail::WorkspaceFiles::remember_read(context, shown, status);

    if (!cut_lines.empty())
      output += "\n[Line" + std::string(cut_lines.size() > 1 ? "s " : " ") + detail::list_line_numbers(cut_lines) +
                (cut_lines.size() > 1 ? " were" : " was") + " longer than " + std::to_string(options_.max_line_length) +
                " characters and " + (cut_lines.size() > 1 ? "were" : "was") +
                " cut. See the rest with Bash, for example `sed -n '" + std::to_string(cut_lines.front()) + "p' " +
                shown + " | cut -c" + std::to_string(options_.max_line_length + 1) + "-" +
                std::to_string(options_.max_line_length * 2) + "`.]\n";
    if (more) {
      output += "\n[Showing lines " + std::to_string(first) + "-" + std::to_string(last_shown);
      output += total_known ? " of " + std::to_string(total_lines) : std::string(" (the file continues)");
      if (stopped_for_size) output += "; output stopped at " + detail::format_size(options_.max_output_bytes);
      output += ". Call Read with offset=" + std::to_string(last_shown + 1) + " to continue.]\n";
    }
    metadata["first_line"] = first;
    metadata["last_line"] = last_shown;
    if (total_known) metadata["total_lines"] = total_lines;
    metadata["truncated"] = more;
    return ToolResult::success(std::move(output), std::move(metadata));
  }

  ReadOptions options_;
  std::string description_;
};

static_assert(Tool<ReadTool>);

}  // namespace cuda_agent
