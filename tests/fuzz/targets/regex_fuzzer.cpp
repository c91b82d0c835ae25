// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for Grep's regex engine, which runs patterns a model wrote inside the
// host process.
//
// An input is a pattern, a newline, and a text. Whatever the bytes, compiling either
// succeeds or throws `SyntaxError`, and searching finishes (the engine is a Pike VM: its
// time is linear in the text, so libFuzzer's timeout catches a regression to
// backtracking) without a sanitizer report. Where pattern and text stay inside what the
// engine and RE2 share (printable ASCII; no `\s`, `\p`, `\C`, `\Q`, nested classes, `x{,n}`,
// counts with leading zeros or flags other than `i`; a text without newlines: the documented
// differences cannot show) and both accept the pattern, both must find the same
// leftmost-first match, from every start position (spread over the text where the
// program is large: see search_budget).
#include <cuda_agent/tools/detail/regex.hpp>

#include <re2/re2.h>

#include <algorithm>    // max, min
#include <cstddef>      // size_t
#include <cstdint>      // uint8_t
#include <cstdio>       // fprintf
#include <cstdlib>      // abort
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

namespace {

namespace regex = cuda_agent::detail::regex;

/// Instructions times bytes that one input's searches may cost, summed over its starts.
constexpr std::size_t search_budget = 4'000'000;

bool printable_ascii(std::string_view text) {
  for (const char c : text)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

/// Whether the pattern keeps to the syntax both engines read the same way. Beyond escapes
/// and flags, a '[' inside a class opens a nested class here (as in Rust's regex) and is a
/// literal in RE2: only POSIX names may stand there.
bool shared_syntax(std::string_view pattern) {
  if (!printable_ascii(pattern)) return false;
  bool in_class = false;
  std::size_t class_start = 0;  // where the class's members begin (after '[' and '^')
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (in_class && pattern[i] == '[') {
      const std::size_t close = pattern.find(":]", i + 2);
      if (i + 1 == pattern.size() || pattern[i + 1] != ':' || close == std::string_view::npos) return false;
      i = close + 1;
    } else if (in_class && pattern[i] == ']' && i != class_start) {
      in_class = false;
    } else if (!in_class && pattern[i] == '[') {
      in_class = true;
      class_start = i + 1 < pattern.size() && pattern[i + 1] == '^' ? i + 2 : i + 1;
      if (class_start > i + 1) ++i;
    }
    if (i + 1 >= pattern.size()) break;
    if (!in_class && pattern[i] == '{' && pattern[i + 1] == ',')
      return false;  // x{,n}: a repetition here, literal in RE2
    if (!in_class && (pattern[i] == '{' || pattern[i] == ',') && pattern[i + 1] == '0' && i + 2 < pattern.size() &&
        pattern[i + 2] >= '0' && pattern[i + 2] <= '9')
      return false;  // x{00,3}: a count with a leading zero is a repetition here (as in Rust), literal in RE2
    if (pattern[i] == '\\') {
      const char escaped = pattern[i + 1];
      if (escaped == 's' || escaped == 'S' || escaped == 'p' || escaped == 'P' || escaped == 'C' || escaped == 'Q' ||
          escaped == 'E' || escaped == 'x' || escaped == 'z' || escaped == 'A')
        return false;
      ++i;
    } else if (pattern[i] == '(' && pattern[i + 1] == '?') {
      // Only (?:...), (?i), (?i:...) and named groups (?P<name>...).
      const std::string_view rest = pattern.substr(i + 2);
      if (rest.starts_with("P<")) continue;
      std::size_t flags = 0;
      while (flags < rest.size() && rest[flags] == 'i') ++flags;
      if (flags == rest.size() || (rest[flags] != ':' && rest[flags] != ')')) return false;
    }
  }
  return true;
}

std::string shown(const std::optional<regex::Match>& match) {
  return match ? "[" + std::to_string(match->begin) + ", " + std::to_string(match->end) + ")" : "no match";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = input.find('\n');
  const std::string pattern(input.substr(0, newline));
  const std::string text(newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1));

  std::optional<regex::Regex> ours;
  try {
    ours.emplace(pattern);
  } catch (const regex::SyntaxError&) {
    return 0;
  }
  // A search costs up to the program's size times the text's length (a Pike VM: linear in
  // each, and a pattern of counted repetitions compiles to up to max_program_size steps).
  // The starts searched from are spread over the text within a budget of that cost, so that
  // every input stays well inside libFuzzer's timeout and only a regression to
  // backtracking (far beyond the budget) trips it.
  const std::size_t cost = std::max<std::size_t>(1, ours->program_size()) * (text.size() + 1);
  const std::size_t searches = std::max<std::size_t>(1, search_budget / cost);
  const auto starts = [&](std::size_t wanted) {
    const std::size_t count = std::min(wanted, searches);
    std::vector<std::size_t> result;
    for (std::size_t k = 0; k < count; ++k) result.push_back(k * (text.size() + 1) / count);
    return result;
  };

  // Arbitrary bytes, invalid UTF-8 included: no crash, no hang.
  for (const std::size_t from : starts(17)) (void)ours->find(text, from);

  if (!shared_syntax(pattern) || !printable_ascii(text)) return 0;
  RE2::Options options;
  options.set_log_errors(false);
  options.set_longest_match(false);
  const RE2 reference(pattern, options);
  if (!reference.ok()) return 0;
  for (const std::size_t from : starts(text.size() + 1)) {
    re2::StringPiece found;
    std::optional<regex::Match> expected;
    if (reference.Match(text, from, text.size(), RE2::UNANCHORED, &found, 1))
      expected = regex::Match{static_cast<std::size_t>(found.data() - text.data()),
                              static_cast<std::size_t>(found.data() - text.data()) + found.size()};
    const std::optional<regex::Match> actual = ours->find(text, from);
    const bool same = expected.has_value() == actual.has_value() &&
                      (!expected || (expected->begin == actual->begin && expected->end == actual->end));
    if (!same) {
      std::fprintf(stderr, "/%s/ on \"%s\" from %zu: RE2 %s, Grep's engine %s\n", pattern.c_str(), text.c_str(), from,
                   shown(expected).c_str(), shown(actual).c_str());
      std::abort();
    }
  }
  return 0;
}
