// SPDX-License-Identifier: Apache-2.0
// Text helpers behind tool output: UTF-8 repair, terminal-control stripping, middle
// truncation, numbering, and the edit helpers' messages and snippets.
#include "catch.hpp"

#include <cuda_agent/tools/detail/text.hpp>
#include <cuda_agent/tools/detail/text_edit.hpp>

#include <string>

namespace detail = cuda_agent::detail;
using Catch::Matchers::Contains;

TEST_CASE("invalid UTF-8 and NUL bytes become U+FFFD", "[tools][text]") {
  CHECK(detail::sanitize_utf8("plain") == "plain");
  CHECK(detail::sanitize_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(detail::sanitize_utf8("a\xFF"
                              "b") ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(detail::sanitize_utf8(std::string("a\0b", 3)) ==
        "a\xEF\xBF\xBD"
        "b");
  CHECK(detail::sanitize_utf8("\xC3") == "\xEF\xBF\xBD");                                  // truncated sequence
  CHECK(detail::sanitize_utf8("\xE0\x80\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  CHECK(detail::sanitize_utf8("\xED\xA0\x80").find("\xED") == std::string::npos);          // surrogate
  CHECK(detail::sanitize_utf8("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");
}

TEST_CASE("terminal control sequences and overwritten progress are removed", "[tools][text]") {
  CHECK(detail::strip_terminal_controls("\x1b[31mred\x1b[0m") == "red");
  CHECK(detail::strip_terminal_controls("\x1b]0;title\x07text") == "text");
  CHECK(detail::strip_terminal_controls("10%\r50%\r100%\ndone\n") == "100%\ndone\n");
  CHECK(detail::strip_terminal_controls("windows\r\nline\r\n") == "windows\r\nline\r\n");
  CHECK(detail::strip_terminal_controls("trailing\r") == "trailing");
}

TEST_CASE("middle truncation keeps both ends and states what it left out", "[tools][text]") {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + "\n";
  const detail::MidTruncated cut = detail::mid_truncate(text, 0, "", 1000, "use head or tail");
  CHECK(cut.text.size() < 1200);
  CHECK(cut.text.starts_with("line 0\nline 1\n"));
  CHECK(cut.text.ends_with("line 1999\n"));
  CHECK(cut.omitted_bytes + 1000 >= text.size() - 200);
  CHECK_THAT(cut.text, Contains("[... " + std::to_string(cut.omitted_bytes) + " bytes omitted from the middle of") &&
                           Contains("use head or tail ...]"));
  // Cuts fall on line boundaries here: no partial line is shown.
  CHECK_THAT(cut.text, !Contains("\nine "));

  const detail::MidTruncated small = detail::mid_truncate("abc", 0, "def", 100, "");
  CHECK(small.text == "abcdef");
  CHECK(small.omitted_bytes == 0);

  const detail::MidTruncated gap = detail::mid_truncate(std::string(600, 'h'), 5000, std::string(600, 't'), 1000, "");
  CHECK(gap.omitted_bytes == 5000 + 200);
  CHECK(gap.text.starts_with(std::string(500, 'h')));
  CHECK(gap.text.ends_with(std::string(500, 't')));
}

TEST_CASE("truncation never splits a UTF-8 sequence", "[tools][text]") {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "\xC3\xA9";
  const detail::MidTruncated cut = detail::mid_truncate(text, 0, "", 101, "");
  CHECK(detail::sanitize_utf8(cut.text) == cut.text);
}

TEST_CASE("lines are numbered like cat -n", "[tools][text]") {
  std::string out;
  detail::append_numbered_line(out, 7, "x = 1");
  CHECK(out == "     7\tx = 1\n");
  CHECK(detail::numbered_excerpt("a\nb\nc\n", 2, 9) == "     2\tb\n     3\tc\n");
  CHECK(detail::count_lines("") == 0);
  CHECK(detail::count_lines("a") == 1);
  CHECK(detail::count_lines("a\nb\n") == 2);
  CHECK(detail::line_number_at("a\nb\nc", 4) == 3);
  CHECK(detail::list_line_numbers({3}) == "3");
  CHECK(detail::list_line_numbers({3, 17, 42}) == "3, 17 and 42");
  CHECK(detail::list_line_numbers({1, 2, 3, 4}, 2) == "1, 2 and 2 more");
  CHECK(detail::format_size(17) == "17 bytes");
  CHECK(detail::format_size(256 * 1024) == "256.0 KB");
}

TEST_CASE("replace_text replaces one occurrence, or all, and names the lines of ambiguous ones", "[tools][text]") {
  const std::string content = "a = 1\nb = 2\na = 1\n";
  CHECK(detail::replace_text(content, "b = 2", "b = 3", false, "f").content == "a = 1\nb = 3\na = 1\n");
  const detail::TextEdit all = detail::replace_text(content, "a = 1", "a = 0", true, "f");
  CHECK(all.content == "a = 0\nb = 2\na = 0\n");
  CHECK(all.replacements == 2);
  CHECK_THROWS_WITH(detail::replace_text(content, "a = 1", "x", false, "f.py"),
                    Contains("Found 2 matches of the string to replace (at lines 1 and 3 of f.py), but replace_all "
                             "is false"));
}

TEST_CASE("a missing string comes with the hint that fits the mistake", "[tools][text]") {
  const std::string content = "def forward(self, x):\n    return x * 2\n";
  CHECK_THROWS_WITH(detail::replace_text(content, "     2\t    return x * 2", "y", false, "m.py"),
                    Contains("String to replace not found in m.py.") && Contains("line-number prefixes") &&
                        Contains("Without them it matches at line 2."));
  CHECK_THROWS_WITH(detail::replace_text(content, "def forward(self, x):\n  return x * 2", "y", false, "m.py"),
                    Contains("differs only in whitespace") && Contains("starts at line 1"));
  CHECK_THROWS_WITH(detail::replace_text(content, "def forward(self, x):\n    return x * 3", "y", false, "m.py"),
                    Contains("its first line \"def forward(self, x):\" appears at line 1, but the lines after it "
                             "differ"));
  CHECK_THROWS_WITH(detail::replace_text(content, "class Model:", "y", false, "m.py"),
                    Contains("not even its first line \"class Model:\" is in the file"));
}

TEST_CASE("the snippet after an edit shows the changed lines with context", "[tools][text]") {
  std::string before;
  for (int i = 1; i <= 20; ++i) before += "line " + std::to_string(i) + "\n";
  std::string after = before;
  after.replace(after.find("line 10\n"), 8, "changed\n");
  const std::string snippet = detail::change_snippet(before, after, 2);
  CHECK(snippet == "     8\tline 8\n     9\tline 9\n    10\tchanged\n    11\tline 11\n    12\tline 12\n");
  std::string many;
  for (int i = 1; i <= 100; ++i) many += "new " + std::to_string(i) + "\n";
  const std::string long_change = detail::change_snippet("a\n", many, 2, 5);
  CHECK_THAT(long_change,
             Contains("     5\tnew 5\n") && Contains("the change continues to line 100") && !Contains("new 6\n"));
}
