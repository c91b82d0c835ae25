// SPDX-License-Identifier: Apache-2.0
// The linear-time matcher behind Grep: ripgrep (Rust regex) syntax and semantics,
// syntax errors that say what to do, and no blow-up on pathological patterns.
#include "catch.hpp"

#include <cuda_agent/tools/detail/regex.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace regex = cuda_agent::detail::regex;
using Catch::Matchers::Contains;

namespace {

/// The matched text, or "<none>".
std::string first_match(const std::string& pattern, const std::string& text, regex::Options options = {}) {
  const regex::Regex compiled(pattern, options);
  const std::optional<regex::Match> match = compiled.find(text);
  return match ? text.substr(match->begin, match->end - match->begin) : std::string("<none>");
}

regex::Options multiline() { return {false, true, false}; }

}  // namespace

TEST_CASE("literals, classes and escapes", "[tools][regex]") {
  CHECK(first_match("abc", "xxabcxx") == "abc");
  CHECK(first_match("a.c", "a-c") == "a-c");
  CHECK(first_match("a\\.c", "abc a.c") == "a.c");
  CHECK(first_match("[a-c]+", "zzabcabz") == "abcab");
  CHECK(first_match("[^a-c]+", "abcxyz") == "xyz");
  CHECK(first_match("[]a]+", "x]a]") == "]a]");
  CHECK(first_match("[a-]+", "x-a-") == "-a-");
  CHECK(first_match("\\d+", "ab123c") == "123");
  CHECK(first_match("\\D+", "12ab3") == "ab");
  CHECK(first_match("\\w+", "  h\xC3\xA9llo_1 ") == "h\xC3\xA9llo_1");
  CHECK(first_match("\\s+\\S", "a  \tb") == "  \tb");
  CHECK(first_match("[[:digit:]]+", "ab42") == "42");
  CHECK(first_match("[[:^alpha:]]+", "ab42cd") == "42");
  CHECK(first_match("[a[xy]]+", "axyb") == "axy");
  CHECK(first_match("[\\d_]+", "a1_2b") == "1_2");
  CHECK(first_match("\\x41\\x{42}\\u{43}", "ABC") == "ABC");
  CHECK(first_match("\\t", "a\tb") == "\t");
  CHECK(first_match("\xC3\xA9+", "\xC3\xA9\xC3\xA9x") == "\xC3\xA9\xC3\xA9");
  CHECK(first_match(".", "\xE2\x82\xAC") == "\xE2\x82\xAC");  // one character, three bytes
  CHECK(first_match("foo{", "a foo{") == "foo{");             // a brace that is not a repetition is literal
  CHECK(first_match("__global__\\s+void\\s+(\\w+)", "extern __global__ void add_kernel(") ==
        "__global__ void add_kernel");
}

TEST_CASE("repetition is leftmost-first, greedy or lazy", "[tools][regex]") {
  CHECK(first_match("a+", "baaa") == "aaa");
  CHECK(first_match("a+?", "baaa") == "a");
  CHECK(first_match("a*", "baaa") == "");
  CHECK(first_match("x{2,3}", "xxxxx") == "xxx");
  CHECK(first_match("x{2,}", "xxxxx") == "xxxxx");
  CHECK(first_match("x{2}", "xxxxx") == "xx");
  CHECK(first_match("x{,2}y", "xxxy") == "xxy");
  CHECK(first_match("x{2,3}?", "xxxxx") == "xx");
  CHECK(first_match("(a|ab)(c|bcd)", "abcd") == "abcd");
  CHECK(first_match("a|b|c", "xxc") == "c");
  CHECK(first_match("(?:ab)+", "ababx") == "abab");
  CHECK(first_match("(?P<name>ab)+", "ababx") == "abab");
  CHECK(first_match("(?<name>ab)+", "ababx") == "abab");
  CHECK(first_match("<.+?>", "<a><b>") == "<a>");
}

TEST_CASE("anchors and word boundaries", "[tools][regex]") {
  CHECK(first_match("^foo$", "foo") == "foo");
  CHECK(first_match("^b", "a\nb") == "b");  // ^ and $ are line anchors, as in ripgrep
  CHECK(first_match("a$", "a\nb", multiline()) == "a");
  CHECK(first_match("\\Ab", "a\nb", multiline()) == "<none>");
  CHECK(first_match("a\\z", "a\nb", multiline()) == "<none>");
  CHECK(first_match("\\bfoo\\b", "a foo b") == "foo");
  CHECK(first_match("\\bfoo\\b", "afoob") == "<none>");
  CHECK(first_match("\\Boo\\B", "afoob") == "oo");
  CHECK(first_match("(?-m)^b", "a\nb", multiline()) == "<none>");
}

TEST_CASE("case-insensitive matching and inline flags", "[tools][regex]") {
  CHECK(first_match("hello", "HELLO", regex::Options{true}) == "HELLO");
  CHECK(first_match("(?i)HeLLo", "say hello") == "hello");
  CHECK(first_match("(?i:a)b", "Ab AB") == "Ab");
  CHECK(first_match("a(?i)b", "AB aB") == "aB");
  CHECK(first_match("[a-c]+", "ABC", regex::Options{true}) == "ABC");
  CHECK(first_match("(?i)\xC3\x89", "\xC3\xA9") == "\xC3\xA9");  // É and é
  CHECK(first_match("(?i)\xD0\x96", "\xD0\xB6") == "\xD0\xB6");  // Ж and ж
  CHECK(first_match("(?i)\xCE\xA3", "\xCF\x83") == "\xCF\x83");  // Σ and σ
}

TEST_CASE("newlines: line-oriented search never crosses lines, multiline may", "[tools][regex]") {
  CHECK(first_match("a.c", "a\nc") == "<none>");
  CHECK(first_match("a[^x]c", "a\nc") == "<none>");
  CHECK(first_match("a\\sc", "a\nc") == "<none>");
  CHECK(first_match("a.c", "a\nc", multiline()) == "a\nc");
  CHECK(first_match("(?s)a.c", "a\nc", regex::Options{false, false, false}) == "a\nc");
  CHECK(first_match("a\\nc", "a\nc", multiline()) == "a\nc");
  CHECK_THROWS_WITH(regex::Regex("a\\nc"), Contains("set multiline to true"));
}

TEST_CASE("repeated empty matches and case-folded negations agree with Rust's regex and RE2", "[tools][regex]") {
  // e* is (e+)?: an e that prefers the empty match ends the repetition at once.
  CHECK(first_match("(|a)*", "aaa") == "");
  CHECK(first_match("(|a)+", "aaa") == "");
  CHECK(first_match("(?:a{0,2}?)*", "aaa") == "");
  CHECK(first_match("(a|)*", "aaa") == "aaa");
  CHECK(first_match("(^)*b", "b") == "b");
  CHECK(first_match("\\b{2}a", " a") == "a");
  // A class is folded before it is negated: (?i)[^a] matches neither 'a' nor 'A'.
  CHECK(first_match("(?i)[^a]", "aAb") == "b");
  CHECK(first_match("(?i)[^[:upper:]]+", "Ab1-") == "1-");
  CHECK(first_match("(?i)[[:^lower:]]", "aB2") == "2");
}

TEST_CASE("unsupported or malformed syntax is a clear error", "[tools][regex]") {
  const auto error = [](const std::string& pattern) {
    try {
      regex::Regex compiled(pattern);
    } catch (const regex::SyntaxError& failure) {
      return std::string(failure.what());
    }
    return std::string("<compiled>");
  };
  CHECK_THAT(error("(?=x)"), Contains("look-ahead and look-behind are not supported"));
  CHECK_THAT(error("(?<!x)a"), Contains("look-ahead and look-behind are not supported"));
  CHECK_THAT(error("(a)\\1"), Contains("backreferences (\\1) are not supported"));
  CHECK_THAT(error("(a"), Contains("unclosed group") && Contains("escape it as \\("));
  CHECK_THAT(error("a)"), Contains("unopened group") && Contains("(at offset 1)"));
  CHECK_THAT(error("*a"), Contains("nothing to repeat"));
  CHECK(error("^*") == "<compiled>");  // an empty-width repetition, as in Rust's regex
  CHECK_THAT(error("[abc"), Contains("unclosed character class"));
  CHECK_THAT(error("[z-a]"), Contains("invalid class range"));
  CHECK_THAT(error("a{1001}"), Contains("may not exceed 1000"));
  CHECK_THAT(error("a{3,2}"), Contains("the maximum is below the minimum"));
  CHECK_THAT(error("\\p{L}"), Contains("Unicode property classes"));
  CHECK_THAT(error("\\q"), Contains("unrecognized escape sequence \\q"));
  CHECK_THAT(error("a\\"), Contains("lone backslash"));
  CHECK_THAT(error("(?x)a"), Contains("the flag 'x' is not supported"));
  CHECK_THAT(error("[[:nope:]]"), Contains("unknown POSIX class"));
  CHECK_THAT(error("\\x{110000}"), Contains("beyond U+10FFFF"));
  CHECK_THAT(error(std::string(300, '(') + std::string(300, ')')), Contains("nested too deeply"));
  CHECK_THAT(error("(a{1000}){1000}"), Contains("too large"));
}

TEST_CASE("bytes that are not UTF-8 match nothing but do not stop the search", "[tools][regex]") {
  CHECK(first_match(".+",
                    "\xFF"
                    "ab") == "ab");
  CHECK(first_match("[^a]+",
                    "\xFF"
                    "bc") == "bc");
}

TEST_CASE("pathological patterns run in linear time", "[tools][regex]") {
  // No literal to skip ahead with: the automaton itself must stay linear.
  const auto started = std::chrono::steady_clock::now();
  const std::string many_a(50'000, 'a');
  CHECK_FALSE(regex::Regex("(a*)*(a|b)*[cd]").search(many_a));
  CHECK_FALSE(regex::Regex("(x+x+)+[yz]").search(std::string(20'000, 'x')));
  CHECK_FALSE(regex::Regex("(a|aa)+$[bc]").search(many_a));
  CHECK(regex::Regex("(.*a){20}").search(std::string(5'000, 'a')));
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(elapsed < std::chrono::seconds(10));
}

TEST_CASE("literals every match needs are searched for first", "[tools][regex]") {
  std::string text(8 << 20, 'x');
  text += "needle here";
  const auto started = std::chrono::steady_clock::now();
  const std::optional<regex::Match> match = regex::Regex("needle\\s+\\w+").find(text);
  REQUIRE(match);
  CHECK(match->begin == 8u << 20);
  CHECK_FALSE(regex::Regex("x+y").search(text.substr(0, 1 << 20)));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
  // Lines that hold the literal but do not match are passed over; the match is leftmost.
  CHECK(first_match("b.*d", "abc\nxbyd\nbzd") == "byd");
  CHECK(first_match("[a-z]+ing\\b", "ing bell\nsingle\nthings sing") == "sing");
  CHECK(first_match("(?i)[a-z]+ HELLO", "say Hi\nwe hello") == "we hello");
  CHECK(first_match("(?i)threadIdx", "a THREADIDX b") == "THREADIDX");
  CHECK(first_match("(?i)abcx", "abcy ABCX") == "ABCX");
  CHECK(first_match("(?i)x_y", "X_Y") == "X_Y");
  // Without a literal, the search skips to bytes that can start a match.
  CHECK(first_match("[A-Z][a-z]+[0-9]{3}", "abc Foo12 Bar123") == "Bar123");
  CHECK(first_match("\\bFoo", "xFoo Foo") == "Foo");
  CHECK(regex::Regex("\\bFoo").find("xFoo Foo")->begin == 5);
  CHECK(first_match("[\xC3\xA9]x", "ab\xC3\xA9x") == "\xC3\xA9x");
  const regex::Regex pattern("o+b");
  const std::string lines = "foob\nbar\nboob";
  const std::optional<regex::Match> second = pattern.find(lines, 4);
  REQUIRE(second);
  CHECK(lines.substr(second->begin, second->end - second->begin) == "oob");
  CHECK(second->begin == 10);
}
