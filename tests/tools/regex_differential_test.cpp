// SPDX-License-Identifier: Apache-2.0
// Grep's matcher against RE2 on generated patterns and texts. Both take RE2's syntax (Rust's
// regex crate, whose syntax ripgrep uses, descends from it) and both have leftmost-first
// semantics, so on what both accept they must find the same first match. The patterns
// come from a grammar of what the two share: literals and escapes, `.`, classes with
// ranges, negation, Perl and POSIX classes, anchors and word boundaries, capturing,
// non-capturing and case-insensitive groups, alternation, and greedy and lazy repetition,
// counted too. The texts are ASCII without newlines, where Unicode tables, case folding
// beyond ASCII, `\s` and line handling (the documented differences) cannot show.
#include "catch.hpp"

#include <cuda_agent/tools/detail/regex.hpp>

#include <re2/re2.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace regex = cuda_agent::detail::regex;

namespace {

/// Random patterns of the shared grammar, and texts over an alphabet they mention.
class PatternGenerator {
 public:
  explicit PatternGenerator(std::uint64_t seed) : random_(seed) {}

  std::string pattern() {
    std::string text = alternation(3);
    if (chance(8)) text = "(?i)" + text;
    return text;
  }

  std::string text() {
    static constexpr std::string_view alphabet = "abcABC-_ 1.";
    std::string result;
    const int length = pick(16);
    for (int i = 0; i < length; ++i)
      result += alphabet[static_cast<std::size_t>(pick(static_cast<int>(alphabet.size())))];
    return result;
  }

 private:
  int pick(int count) { return std::uniform_int_distribution<int>(0, count - 1)(random_); }
  bool chance(int one_in) { return pick(one_in) == 0; }

  std::string alternation(int depth) {
    std::string text = concatenation(depth);
    while (chance(4)) text += "|" + concatenation(depth);
    return text;
  }

  std::string concatenation(int depth) {
    std::string text;
    const int pieces = 1 + pick(3);
    for (int i = 0; i < pieces; ++i) text += piece(depth);
    return text;
  }

  std::string piece(int depth) {
    const auto [text, repeatable] = atom(depth);
    if (!repeatable || !chance(3)) return text;
    static constexpr const char* quantifiers[] = {"*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}"};
    std::string quantified = text + quantifiers[pick(7)];
    if (chance(3)) quantified += "?";  // lazy
    return quantified;
  }

  std::pair<std::string, bool> atom(int depth) {
    static constexpr std::string_view literals = "abcAB-_ 1";
    static constexpr const char* perl[] = {"\\d", "\\w", "\\s", "\\D", "\\W", "\\S"};
    static constexpr const char* anchors[] = {"^", "$", "\\b", "\\B"};
    static constexpr const char* escaped[] = {"\\.", "\\-", "\\*", "\\+",  "\\?", "\\(", "\\)",   "\\[",    "\\]",
                                              "\\|", "\\^", "\\$", "\\\\", "\\{", "\\}", "\\x41", "\\x{62}"};
    switch (pick(depth > 0 ? 11 : 7)) {
      case 0:
      case 1:
        return {std::string(1, literals[static_cast<std::size_t>(pick(static_cast<int>(literals.size())))]), true};
      case 2:
        return {".", true};
      case 3:
        return {bracket(), true};
      case 4:
        return {perl[pick(6)], true};
      case 5:
        return {anchors[pick(4)], false};
      case 6:
        return {escaped[pick(17)], true};
      case 7:
        return {"(" + alternation(depth - 1) + ")", true};
      case 8:
        return {"(?:" + alternation(depth - 1) + ")", true};
      case 9:
        return {"(?i:" + alternation(depth - 1) + ")", true};
      default:
        return {
            "(?P<g" + std::to_string(pick(100)) + "_" + std::to_string(counter_++) + ">" + alternation(depth - 1) + ")",
            true};
    }
  }

  std::string bracket() {
    static constexpr const char* members[] = {"a",         "b",         "c",   "A",   "a-c", "0-9",
                                              "_",         " ",         "\\d", "\\w", "\\s", "[:alpha:]",
                                              "[:digit:]", "[:upper:]", "\\-", "\\]", "."};
    std::string text = chance(3) ? "[^" : "[";
    const int count = 1 + pick(3);
    for (int i = 0; i < count; ++i) text += members[pick(17)];
    return text + "]";
  }

  std::mt19937_64 random_;
  int counter_ = 0;
};

std::string describe(const std::optional<regex::Match>& match) {
  if (!match) return "no match";
  std::ostringstream text;
  text << "[" << match->begin << ", " << match->end << ")";
  return text.str();
}

}  // namespace

TEST_CASE("Grep's matcher finds the first match RE2 finds, on generated patterns and texts", "[tools][regex]") {
  PatternGenerator generate(20261201);
  RE2::Options options;
  options.set_log_errors(false);
  options.set_longest_match(false);
  int patterns = 0;
  int comparisons = 0;
  int matched = 0;
  std::vector<std::string> disagreements;
  for (int round = 0; round < 4000 && disagreements.size() < 10; ++round) {
    const std::string pattern = generate.pattern();
    const RE2 reference(pattern, options);
    std::optional<regex::Regex> ours;
    std::string refusal;
    try {
      ours.emplace(pattern);
    } catch (const regex::SyntaxError& error) {
      refusal = error.what();
    }
    if (ours.has_value() != reference.ok()) {
      disagreements.push_back("/" + pattern + "/ compiles " + (ours ? "here" : "here not (" + refusal + ")") +
                              ", in RE2 " + (reference.ok() ? "too" : "not (" + reference.error() + ")"));
      continue;
    }
    if (!ours) continue;
    ++patterns;
    for (int sample = 0; sample < 8; ++sample) {
      const std::string text = generate.text();
      re2::StringPiece found;
      std::optional<regex::Match> expected;
      if (reference.Match(text, 0, text.size(), RE2::UNANCHORED, &found, 1))
        expected = regex::Match{static_cast<std::size_t>(found.data() - text.data()),
                                static_cast<std::size_t>(found.data() - text.data()) + found.size()};
      const std::optional<regex::Match> actual = ours->find(text);
      ++comparisons;
      matched += expected ? 1 : 0;
      const bool same = expected.has_value() == actual.has_value() &&
                        (!expected || (expected->begin == actual->begin && expected->end == actual->end));
      if (!same)
        disagreements.push_back("/" + pattern + "/ on \"" + text + "\": RE2 " + describe(expected) + ", here " +
                                describe(actual));
    }
  }
  for (const std::string& each : disagreements) UNSCOPED_INFO(each);
  CHECK(disagreements.empty());
  // The grammar reaches what it should: most patterns compile, and both outcomes occur often.
  CHECK(patterns > 3500);
  CHECK(matched > comparisons / 5);
  CHECK(matched < comparisons * 4 / 5);
}
