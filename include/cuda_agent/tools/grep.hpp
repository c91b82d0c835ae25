// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Grep tool (Claude Code's contract, ripgrep's parameters and output): `pattern`,
/// `path`, `glob`, `type`, `output_mode` (content | files_with_matches | count), `-i`,
/// `-n`, `-A`/`-B`/`-C`, `multiline`, `head_limit`, `offset`. Implemented in C++ (it
/// does not need ripgrep installed), with ripgrep's regex syntax matched in linear time.

#include <algorithm>    // sort, max, min, upper_bound
#include <chrono>       // milliseconds, steady_clock
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <map>          // map
#include <optional>     // optional
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move, pair
#include <vector>       // vector

#include <fcntl.h>     // O_*
#include <sys/stat.h>  // fstat

#include <nlohmann/json.hpp>

#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/confined_fs.hpp"
#include "cuda_agent/tools/detail/glob_match.hpp"
#include "cuda_agent/tools/detail/regex.hpp"
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"
#include "cuda_agent/tools/file_access.hpp"
#include "cuda_agent/tools/glob.hpp"

namespace cuda_agent {

struct GrepOptions {
  /// Output lines (or files) returned when the call gives no head_limit; 0 is unlimited.
  std::size_t default_head_limit = 250;
  /// The text returned stops before it exceeds this.
  std::size_t max_output_bytes = 30'000;
  /// Longer lines are cut in content output.
  std::size_t max_line_length = 500;
  /// Larger files are skipped (and named in the result).
  std::uint64_t max_file_bytes = 64ull * 1024 * 1024;
  std::size_t max_entries = 200'000;
  /// The search stops (returning what it found) after this long.
  std::chrono::milliseconds time_budget{30'000};
  PathResolution resolution = PathResolution::automatic;
};

namespace detail {

/// ripgrep's file types (the common subset), as file-name globs.
inline const std::map<std::string, std::vector<std::string>, std::less<>>& grep_file_types() {
  static const std::map<std::string, std::vector<std::string>, std::less<>> types = {
      {"asm", {"*.asm", "*.s", "*.S"}},
      {"c", {"*.c", "*.h", "*.H"}},
      {"cmake", {"*.cmake", "CMakeLists.txt"}},
      {"cpp",
       {"*.C", "*.cc", "*.cpp", "*.cxx", "*.c++", "*.h", "*.H", "*.hh", "*.hpp", "*.hxx", "*.h++", "*.inl", "*.ipp",
        "*.tpp"}},
      {"csv", {"*.csv"}},
      {"css", {"*.css", "*.scss"}},
      {"cuda", {"*.cu", "*.cuh"}},
      {"go", {"*.go"}},
      {"html", {"*.htm", "*.html"}},
      {"ini", {"*.ini", "*.cfg"}},
      {"java", {"*.java"}},
      {"js", {"*.js", "*.jsx", "*.mjs", "*.cjs", "*.vue"}},
      {"json", {"*.json", "*.jsonl", "*.ipynb"}},
      {"log", {"*.log"}},
      {"lua", {"*.lua"}},
      {"make", {"Makefile", "makefile", "GNUmakefile", "*.mk", "*.mak"}},
      {"markdown", {"*.md", "*.markdown", "*.mdx"}},
      {"md", {"*.md", "*.markdown", "*.mdx"}},
      {"ptx", {"*.ptx"}},
      {"py", {"*.py", "*.pyi", "*.pyx", "*.pxd"}},
      {"python", {"*.py", "*.pyi", "*.pyx", "*.pxd"}},
      {"rst", {"*.rst"}},
      {"ruby", {"*.rb", "Gemfile", "Rakefile"}},
      {"rust", {"*.rs"}},
      {"sh", {"*.sh", "*.bash", "*.zsh", ".bashrc", ".bash_profile", ".zshrc", ".profile"}},
      {"sql", {"*.sql"}},
      {"toml", {"*.toml", "Cargo.lock"}},
      {"ts", {"*.ts", "*.tsx", "*.mts", "*.cts"}},
      {"txt", {"*.txt"}},
      {"xml", {"*.xml", "*.xsd", "*.xsl"}},
      {"yaml", {"*.yaml", "*.yml"}},
  };
  return types;
}

/// Start offsets of the lines of a text, for mapping byte offsets to line indexes.
class LineIndex {
 public:
  explicit LineIndex(std::string_view text) {
    starts_.push_back(0);
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n' && i + 1 < text.size()) starts_.push_back(i + 1);
    size_ = text.size();
  }
  /// 0-based index of the line holding byte `offset`.
  [[nodiscard]] std::size_t line_of(std::size_t offset) const {
    return static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
  }
  [[nodiscard]] std::size_t count() const noexcept { return starts_.size(); }
  [[nodiscard]] std::string_view line(std::string_view text, std::size_t index) const {
    const std::size_t begin = starts_[index];
    std::size_t end = index + 1 < starts_.size() ? starts_[index + 1] - 1 : size_;
    if (end > begin && index + 1 == starts_.size() && text[end - 1] == '\n') --end;
    return text.substr(begin, end - begin);
  }

 private:
  std::vector<std::size_t> starts_;
  std::size_t size_ = 0;
};

/// The 0-based indexes of the lines a pattern matches in `text` (ascending, unique).
inline std::vector<std::size_t> matching_lines(const regex::Regex& pattern, std::string_view text, bool multiline,
                                               regex::Scratch& scratch) {
  std::vector<std::size_t> found;
  if (text.empty()) return found;  // an empty file has no lines to match
  // Line numbers are counted as the matches move forward, never from the start again.
  std::size_t counted_to = 0;
  std::size_t line = 0;
  const auto line_at = [&](std::size_t offset) {
    line += static_cast<std::size_t>(std::count(text.begin() + static_cast<std::ptrdiff_t>(counted_to),
                                                text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
    counted_to = offset;
    return line;
  };
  const bool final_newline = text.back() == '\n';
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::optional<regex::Match> match = pattern.find(text, at, scratch);
    if (!match) break;
    // An empty match after the final newline would report a line that does not exist.
    if (match->begin == text.size() && final_newline) break;
    const std::size_t first = line_at(match->begin);
    const std::size_t last = multiline && match->end > match->begin ? line_at(match->end - 1) : first;
    for (std::size_t each = found.empty() ? first : std::max(first, found.back() + 1); each <= last; ++each)
      found.push_back(each);
    if (!multiline) {
      const std::size_t line_end = text.find('\n', match->begin);  // line-oriented matches hold no newline
      if (line_end == std::string_view::npos) break;
      at = line_end + 1;
    } else if (match->end > match->begin) {
      at = match->end;
    } else {
      at = match->begin + (match->begin < text.size() ? regex::decode(text, match->begin).second : 1);
    }
  }
  return found;
}

}  // namespace detail

/// Searches file contents with a regular expression.
class GrepTool {
 public:
  explicit GrepTool(GrepOptions options = {}) : options_(options) {
    std::string types;
    for (const auto& [name, globs] : detail::grep_file_types()) types += (types.empty() ? "" : ", ") + name;
    description_ =
        "A powerful search tool with ripgrep's parameters and output, built in.\n\n"
        "Usage:\n"
        "- ALWAYS use Grep for search tasks; do not run grep or rg through Bash.\n"
        "- pattern is a regular expression in ripgrep (Rust regex) syntax, e.g. \"log.*Error\" or "
        "\"__global__\\s+void\\s+\\w+\". Escape literal special characters: to find \"foo(\" search \"foo\\(\", "
        "for \"a.b\" search \"a\\.b\". There are no backreferences and no look-around.\n"
        "- path is a file or directory to search (absolute, or relative to the workspace root; default: the "
        "workspace root). Filter files with glob (e.g. \"*.cu\", \"*.{cu,cuh}\", \"!*_test.py\") or type (one of: " +
        types +
        ").\n"
        "- output_mode: \"files_with_matches\" (default) lists matching files, newest first; \"content\" shows "
        "matching lines as path:line:text (context lines as path-line-text, groups separated by --), and supports "
        "-A, -B, -C (context lines) and -n (line numbers, default true); \"count\" gives matching lines per file.\n"
        "- head_limit keeps the first N lines or files of the output (default " +
        std::to_string(options_.default_head_limit) +
        "; 0 for no limit), offset skips the first N (for paging).\n"
        "- Patterns match within one line. Set multiline to true to match across lines (then `.` also matches "
        "newlines), e.g. \"struct \\w+ \\{[\\s\\S]*?field\".\n"
        "- -i makes the search case-insensitive. Hidden files, binary files, symbolic links and files over " +
        detail::format_size(options_.max_file_bytes) + " are skipped.";
  }

  [[nodiscard]] std::string_view name() const noexcept { return "Grep"; }
  [[nodiscard]] std::string_view description() const noexcept { return description_; }
  [[nodiscard]] nlohmann::json parameters() const {
    const auto non_negative = [](const char* description) {
      return nlohmann::json{{"type", "integer"}, {"minimum", 0}, {"description", description}};
    };
    return {{"type", "object"},
            {"properties",
             {{"pattern",
               {{"type", "string"},
                {"minLength", 1},
                {"description", "The regular expression to search for (ripgrep syntax)."}}},
              {"path", detail::property("string",
                                        "File or directory to search in (absolute, or relative to the workspace "
                                        "root). Defaults to the workspace root.")},
              {"glob", detail::property("string",
                                        "Glob pattern to filter files (e.g. \"*.py\", \"*.{cu,cuh}\"); a leading ! "
                                        "excludes. Maps to rg --glob.")},
              {"type", detail::property("string",
                                        "File type to search (e.g. py, cpp, cuda, c, js). More efficient than glob "
                                        "for standard file types. Maps to rg --type.")},
              {"output_mode",
               {{"type", "string"},
                {"enum", {"content", "files_with_matches", "count"}},
                {"description",
                 "\"content\" shows matching lines, \"files_with_matches\" shows file "
                 "paths (default), \"count\" shows match counts per file."}}},
              {"-B", non_negative("Lines to show before each match (content mode only).")},
              {"-A", non_negative("Lines to show after each match (content mode only).")},
              {"-C", non_negative("Lines to show before and after each match (content mode only).")},
              {"context", non_negative("Same as -C.")},
              {"-n",
               {{"type", "boolean"},
                {"description", "Show line numbers in the output (content mode only; default true)."}}},
              {"-i", detail::property("boolean", "Case-insensitive search.")},
              {"head_limit", non_negative("Limit the output to the first N lines or entries, like \"| head -N\" "
                                          "(default 250; 0 means no limit).")},
              {"offset", non_negative("Skip the first N lines or entries before applying head_limit (default 0).")},
              {"multiline",
               {{"type", "boolean"},
                {"description",
                 "Let patterns span lines; `.` then matches newlines too (default "
                 "false)."}}}}},
            {"required", {"pattern"}},
            {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return grep(arguments, context); });
  }

 private:
  /// Offset, head limit and size cap over output lines; lines past them are counted.
  class Page {
   public:
    Page(std::size_t offset, std::size_t limit, std::size_t max_bytes)
        : offset_(offset), limit_(limit), max_bytes_(max_bytes) {}
    /// Whether the next line will be shown; lines that will not need not be formatted.
    [[nodiscard]] bool needs_text() const noexcept {
      return seen_ >= offset_ && (limit_ == 0 || shown_ < limit_) && !cut_for_size_;
    }
    /// Counts a line without showing it (before the offset, or past the limits).
    void skip() {
      if (++seen_ > offset_) ++omitted_;
    }
    void add(const std::string& line) {
      if (!needs_text()) return skip();
      ++seen_;
      if (text_.size() + line.size() + 1 > max_bytes_ && shown_ > 0) {
        cut_for_size_ = true;
        ++omitted_;
        return;
      }
      if (!text_.empty()) text_ += '\n';
      text_ += line;
      ++shown_;
    }
    [[nodiscard]] const std::string& text() const noexcept { return text_; }
    [[nodiscard]] std::size_t omitted() const noexcept { return omitted_; }
    [[nodiscard]] std::size_t shown() const noexcept { return shown_; }
    [[nodiscard]] bool cut_for_size() const noexcept { return cut_for_size_; }

   private:
    std::size_t offset_;
    std::size_t limit_;
    std::size_t max_bytes_;
    std::size_t seen_ = 0;
    std::size_t shown_ = 0;
    std::size_t omitted_ = 0;
    bool cut_for_size_ = false;
    std::string text_;
  };

  /// Prints matching lines and their context as ripgrep does: path:line:text for
  /// matches, path-line-text for context, "--" between groups that do not touch.
  class ContentPrinter {
   public:
    ContentPrinter(const nlohmann::json& arguments, std::size_t max_line_length)
        : numbers_(detail::bool_argument(arguments, "-n", true)), max_line_length_(max_line_length) {
      const std::int64_t both = detail::integer_argument(arguments, "-C")
                                    .value_or(detail::integer_argument(arguments, "context").value_or(0));
      before_ = static_cast<std::size_t>(detail::integer_argument(arguments, "-B").value_or(both));
      after_ = static_cast<std::size_t>(detail::integer_argument(arguments, "-A").value_or(both));
    }

    void print(Page& page, const std::string& prefix, std::string_view content, const detail::LineIndex& index,
               const std::vector<std::size_t>& lines) {
      std::vector<std::pair<std::size_t, std::size_t>> groups;  // each match with its context, merged where they touch
      for (const std::size_t line : lines) {
        const std::size_t from = line > before_ ? line - before_ : 0;
        const std::size_t to = std::min(index.count() - 1, line + after_);
        if (!groups.empty() && from <= groups.back().second + 1)
          groups.back().second = std::max(groups.back().second, to);
        else
          groups.emplace_back(from, to);
      }
      std::size_t next_match = 0;
      for (const auto& [from, to] : groups) {
        if ((before_ > 0 || after_ > 0) && !first_group_) page.add("--");
        first_group_ = false;
        for (std::size_t line = from; line <= to; ++line) {
          if (!page.needs_text()) {
            page.skip();
            continue;
          }
          while (next_match < lines.size() && lines[next_match] < line) ++next_match;
          const bool is_match = next_match < lines.size() && lines[next_match] == line;
          page.add(format(prefix, line, is_match, index.line(content, line)));
        }
      }
    }

   private:
    [[nodiscard]] std::string format(const std::string& prefix, std::size_t line, bool is_match,
                                     std::string_view text) const {
      const char separator = is_match ? ':' : '-';
      std::string out;
      if (!prefix.empty()) {
        out += prefix;
        out += separator;
      }
      if (numbers_) {
        out += std::to_string(line + 1);
        out += separator;
      }
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      const std::size_t cut = detail::utf8_boundary_at_or_before(text, std::min(text.size(), max_line_length_));
      out += detail::sanitize_utf8(text.substr(0, cut));
      if (cut < text.size()) out += " [... line cut at " + std::to_string(max_line_length_) + " characters]";
      return out;
    }

    bool numbers_;
    std::size_t max_line_length_;
    std::size_t before_ = 0;
    std::size_t after_ = 0;
    bool first_group_ = true;
  };

  struct FileMatches {
    std::string relative;
    std::filesystem::file_time_type modified;
    std::size_t lines = 0;
  };

  /// What to search: the file or the directory's files that pass glob and type, by path.
  struct Candidates {
    std::vector<detail::ListedFile> files;
    bool single_file = false;
    std::string incomplete;
  };

  static detail::regex::Regex compile(const nlohmann::json& arguments, bool multiline) {
    try {
      return detail::regex::Regex(
          detail::string_argument(arguments, "pattern"),
          detail::regex::Options{detail::bool_argument(arguments, "-i", false), multiline, !multiline});
    } catch (const detail::regex::SyntaxError& error) {
      throw detail::ToolFailure(std::string("Invalid regular expression: ") + error.what() +
                                ". Grep uses ripgrep's regex syntax: escape the special characters ( ) [ ] { } . * + ? "
                                "| ^ $ \\ with a backslash to match them literally (for example \"foo\\(\" finds "
                                "\"foo(\").");
    }
  }

  Candidates candidates(const detail::WorkspaceFiles& files, const nlohmann::json& arguments,
                        const ToolContext& context, std::chrono::steady_clock::time_point deadline) const {
    using detail::ToolFailure;
    const std::string glob_text = detail::string_argument(arguments, "glob");
    const detail::GlobFilter glob(glob_text);
    const std::string type = detail::string_argument(arguments, "type");
    std::vector<detail::GlobPattern> type_globs;
    if (!type.empty()) {
      const auto found = detail::grep_file_types().find(type);
      if (found == detail::grep_file_types().end()) {
        std::string known;
        for (const auto& [name, globs] : detail::grep_file_types()) known += (known.empty() ? "" : ", ") + name;
        throw ToolFailure("Unknown file type \"" + type + "\". Known types: " + known +
                          ". Use glob for other files (for example glob \"*.cu\").");
      }
      for (const std::string& each : found->second) type_globs.emplace_back(each);
    }

    const std::string given_path = detail::string_argument(arguments, "path");
    const std::string target = given_path.empty() ? std::string() : files.relative(given_path, "path");
    struct stat status {};
    {
      detail::UniqueFd fd;
      if (const int error = files.root().try_open(target, O_PATH, true, fd); error != 0)
        throw ToolFailure(error == ENOENT ? "Path does not exist: " + detail::shown_path(files.absolute(target)) + "."
                                          : detail::describe_path_error(error, files.absolute(target)));
      if (::fstat(fd.get(), &status) != 0)
        throw ToolFailure(detail::describe_path_error(errno, files.absolute(target)));
    }
    Candidates result;
    if (!S_ISDIR(status.st_mode)) {  // an explicit file is searched whatever glob and type say, as ripgrep does
      if (!S_ISREG(status.st_mode))
        throw ToolFailure(detail::shown_path(files.absolute(target)) + " is not a regular file or a directory.");
      result.single_file = true;
      result.files.push_back({target, detail::modification_time(status), static_cast<std::uint64_t>(status.st_size)});
      return result;
    }
    detail::ListOptions list;
    list.include_hidden = !glob_text.empty() && (glob_text.front() == '.' || glob_text.find("/.") != std::string::npos);
    list.max_entries = options_.max_entries;
    list.cancellation = context.cancellation();
    list.deadline = deadline;
    detail::FileListing listing = detail::list_files(files.root(), target, list);
    if (listing.incomplete) result.incomplete = listing.incomplete_reason;
    for (detail::ListedFile& file : listing.files) {
      const std::string_view inside = detail::relative_to(file.relative, target);
      if (!glob.admits(inside)) continue;
      const auto typed = [&] {
        for (const detail::GlobPattern& each : type_globs)
          if (each.matches_file(inside)) return true;
        return type_globs.empty();
      };
      if (typed()) result.files.push_back(std::move(file));
    }
    std::sort(result.files.begin(), result.files.end(),
              [](const detail::ListedFile& a, const detail::ListedFile& b) { return a.relative < b.relative; });
    return result;
  }

  ToolResult grep(const nlohmann::json& arguments, ToolContext& context) const {
    const std::string mode = detail::string_argument(arguments, "output_mode", "files_with_matches");
    const bool multiline = detail::bool_argument(arguments, "multiline", false);
    const detail::regex::Regex pattern = compile(arguments, multiline);
    const detail::WorkspaceFiles files(context, options_.resolution);
    const auto deadline = std::chrono::steady_clock::now() + options_.time_budget;
    Candidates search = candidates(files, arguments, context, deadline);

    const std::size_t head_limit =
        static_cast<std::size_t>(detail::integer_argument(arguments, "head_limit")
                                     .value_or(static_cast<std::int64_t>(options_.default_head_limit)));
    const std::size_t offset = static_cast<std::size_t>(detail::integer_argument(arguments, "offset").value_or(0));
    Page page(offset, head_limit, options_.max_output_bytes);
    ContentPrinter printer(arguments, options_.max_line_length);

    // Files are searched in path order; content and count output is produced as they go.
    std::vector<FileMatches> matched;
    detail::regex::Scratch scratch;
    std::vector<std::string> skipped_large;
    std::size_t searched = 0;
    std::size_t total_lines = 0;
    for (const detail::ListedFile& file : search.files) {
      if (context.cancellation().stop_requested()) {
        search.incomplete = "cancelled";
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        search.incomplete = "out of time after " + std::to_string(options_.time_budget.count() / 1000) + " s";
        break;
      }
      if (file.size > options_.max_file_bytes) {
        skipped_large.push_back(file.relative);
        continue;
      }
      detail::UniqueFd fd;
      if (files.root().try_open(file.relative, O_RDONLY | O_NONBLOCK | O_NOCTTY, search.single_file, fd) != 0) continue;
      struct stat status {};
      if (::fstat(fd.get(), &status) != 0 || !S_ISREG(status.st_mode)) continue;
      std::string content;
      try {
        content = detail::read_all(fd.get(), options_.max_file_bytes, files.absolute(file.relative));
      } catch (const detail::ToolFailure&) {
        skipped_large.push_back(file.relative);  // it grew since it was listed
        continue;
      }
      ++searched;
      if (detail::looks_binary(content)) continue;
      const std::vector<std::size_t> lines = detail::matching_lines(pattern, content, multiline, scratch);
      if (lines.empty()) continue;
      total_lines += lines.size();
      matched.push_back({file.relative, file.modified, lines.size()});
      const std::string shown = detail::sanitize_utf8(files.absolute(file.relative));
      if (mode == "content")
        printer.print(page, search.single_file ? std::string() : shown, content, detail::LineIndex(content), lines);
      else if (mode == "count")
        page.add(shown + ":" + std::to_string(lines.size()));
    }

    std::string output;
    if (mode == "files_with_matches") {
      std::sort(matched.begin(), matched.end(), [](const FileMatches& a, const FileMatches& b) {
        return a.modified != b.modified ? a.modified > b.modified : a.relative < b.relative;
      });
      for (const FileMatches& file : matched) page.add(detail::sanitize_utf8(files.absolute(file.relative)));
      output = matched.empty() ? "No files found"
                               : "Found " + std::to_string(matched.size()) +
                                     (matched.size() == 1 ? " file" : " files") + "\n" + page.text();
    } else if (mode == "count") {
      output = matched.empty() ? "No matches found"
                               : page.text() + "\n\nFound " + std::to_string(total_lines) + " matching " +
                                     (total_lines == 1 ? "line" : "lines") + " in " + std::to_string(matched.size()) +
                                     (matched.size() == 1 ? " file." : " files.");
    } else {
      output = matched.empty() ? "No matches found" : page.text();
    }

    if (page.omitted() > 0) {
      output += "\n\n[Showing results with pagination = limit: " + std::to_string(head_limit) +
                ", offset: " + std::to_string(offset) + "; " + std::to_string(page.omitted()) +
                (mode == "content" ? " more lines" : " more entries") + " not shown";
      if (page.cut_for_size()) output += " (the output reached " + detail::format_size(options_.max_output_bytes) + ")";
      output += ". Narrow the search, or call again with offset=" + std::to_string(offset + page.shown()) +
                " for the next page.]";
    }
    if (!skipped_large.empty())
      output += "\n[Skipped " + std::to_string(skipped_large.size()) + " file" +
                (skipped_large.size() == 1 ? "" : "s") + " larger than " +
                detail::format_size(options_.max_file_bytes) + ", e.g. " +
                detail::shown_path(files.absolute(skipped_large.front())) + "; search it with Bash.]";
    if (!search.incomplete.empty())
      output += "\n[The search stopped early (" + search.incomplete +
                "); results are incomplete. Narrow path, glob or type.]";
    return ToolResult::success(std::move(output), {{"files_searched", searched},
                                                   {"files_matched", matched.size()},
                                                   {"matching_lines", total_lines},
                                                   {"output_mode", mode},
                                                   {"truncated", page.omitted() > 0 || !search.incomplete.empty()}});
  }

  GrepOptions options_;
  std::string description_;
};

static_assert(Tool<GrepTool>);

}  // namespace cuda_agent
