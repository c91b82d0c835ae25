// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Regular expressions in ripgrep's (Rust regex) syntax, matched in linear time.
///
/// Grep runs in the host process on patterns a model wrote and files it may have
/// crafted, so the matcher must neither backtrack exponentially nor recurse with the
/// input: the parser bounds nesting and program size, and matching is a Pike VM (a
/// breadth-first NFA simulation, O(text × program)) with leftmost-first semantics, as
/// Rust's regex crate has. Input is UTF-8; bytes that are not well-formed UTF-8 match
/// nothing, as in ripgrep's Unicode mode.
///
/// Supported: literals and escapes (\t \n \r \f \v \a \e \xHH \x{H…} \u{H…}), `.`,
/// classes `[a-z]` `[^…]` with nested classes and POSIX names `[[:alpha:]]`, \d \w \s
/// and their negations, anchors ^ $ \A \z \b \B (^ and $ match at line boundaries, as in
/// ripgrep), groups `(…)` `(?:…)` `(?P<n>…)` `(?<n>…)`, flags `(?i)` `(?s)` `(?m)` and
/// scoped `(?i:…)`, alternation, and greedy or lazy `*` `+` `?` `{n}` `{n,}` `{n,m}`.
/// Like Rust's regex, there are no backreferences and no look-around; using them is a
/// syntax error that says so. Case folding covers ASCII, Latin-1, Greek and Cyrillic.

#include <algorithm>    // sort, max, min
#include <array>        // array
#include <cstddef>      // size_t
#include <cstdint>      // uint32_t, uint8_t
#include <cstring>      // memchr, memmem
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // pair, move
#include <vector>       // vector

namespace cuda_agent::detail::regex {

/// A pattern that cannot be compiled, with the byte offset where the problem is.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(const std::string& message, std::size_t position)
      : std::runtime_error(message + " (at offset " + std::to_string(position) + ")"), position_(position) {}
  [[nodiscard]] std::size_t position() const noexcept { return position_; }

 private:
  std::size_t position_;
};

struct Options {
  bool case_insensitive = false;
  /// `.` matches '\n' too (ripgrep's --multiline-dotall).
  bool dot_matches_newline = false;
  /// No match may contain '\n' (ripgrep's line-oriented search): classes and `.` never
  /// match it, and a literal newline in the pattern is an error.
  bool line_oriented = true;
};

/// A match: bytes [begin, end) of the text.
struct Match {
  std::size_t begin = 0;
  std::size_t end = 0;
};

using Range = std::pair<char32_t, char32_t>;
using RangeSet = std::vector<Range>;

inline constexpr char32_t max_code_point = 0x10FFFF;
/// Bytes that are not well-formed UTF-8 decode to this plus the byte: above every class.
inline constexpr char32_t invalid_byte_base = 0x110000;

/// The code point at `text[index]` and its length in bytes.
inline std::pair<char32_t, std::size_t> decode(std::string_view text, std::size_t index) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(index);
  if (lead < 0x80) return {lead, 1};
  std::size_t length = 0;
  char32_t value = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {invalid_byte_base + lead, 1};
  }
  if (index + length > text.size() || byte(index + 1) < low || byte(index + 1) > high)
    return {invalid_byte_base + lead, 1};
  for (std::size_t i = 1; i < length; ++i) {
    const unsigned char next = byte(index + i);
    if (i > 1 && (next < 0x80 || next > 0xBF)) return {invalid_byte_base + lead, 1};
    value = (value << 6) | (next & 0x3F);
  }
  return {value, length};
}

/// The code point that ends just before `index`.
inline char32_t decode_before(std::string_view text, std::size_t index) noexcept {
  std::size_t start = index - 1;
  for (int back = 0; back < 3 && start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80; ++back) --start;
  const auto [value, length] = decode(text, start);
  if (start + length != index) return invalid_byte_base + static_cast<unsigned char>(text[index - 1]);
  return value;
}

/// The other case of `c` for the scripts this matcher folds, or `c` itself.
inline char32_t other_case(char32_t c) noexcept {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

inline void normalize(RangeSet& set) {
  std::sort(set.begin(), set.end());
  RangeSet merged;
  for (const Range& range : set) {
    if (!merged.empty() && range.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, range.second);
    else
      merged.push_back(range);
  }
  set = std::move(merged);
}

inline RangeSet complement(const RangeSet& set) {
  RangeSet result;
  char32_t next = 0;
  for (const Range& range : set) {
    if (range.first > next) result.emplace_back(next, range.first - 1);
    next = range.second + 1;
  }
  if (next <= max_code_point) result.emplace_back(next, max_code_point);
  return result;
}

inline void add_case_folds(RangeSet& set) {
  RangeSet extra;
  for (const Range& range : set) {
    // Only the folded scripts matter; clamp the scan to them.
    const char32_t low = range.first;
    const char32_t high = std::min<char32_t>(range.second, 0x45F);
    for (char32_t c = low; c <= high; ++c) {
      const char32_t other = other_case(c);
      if (other != c) extra.emplace_back(other, other);
    }
  }
  set.insert(set.end(), extra.begin(), extra.end());
  normalize(set);
}

inline void remove_code_point(RangeSet& set, char32_t c) {
  RangeSet result;
  for (const Range& range : set) {
    if (c < range.first || c > range.second) {
      result.push_back(range);
      continue;
    }
    if (range.first < c) result.emplace_back(range.first, c - 1);
    if (c < range.second) result.emplace_back(c + 1, range.second);
  }
  set = std::move(result);
}

inline RangeSet digit_ranges() { return {{'0', '9'}}; }
inline RangeSet space_ranges() {
  return {{'\t', '\r'},     {' ', ' '},       {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
          {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
}
/// ASCII word characters exactly; outside ASCII, letters of the common scripts (an
/// approximation of Unicode's \w that leaves out punctuation and symbols blocks).
inline RangeSet word_ranges() {
  return {{'0', '9'},       {'A', 'Z'},       {'_', '_'},       {'a', 'z'},       {0xAA, 0xAA},
          {0xB5, 0xB5},     {0xBA, 0xBA},     {0xC0, 0xD6},     {0xD8, 0xF6},     {0xF8, 0x2BF},
          {0x370, 0x1FFF},  {0x2C00, 0x2DFF}, {0x3040, 0xD7FF}, {0xF900, 0xFDFF}, {0xFE70, 0xFEFF},
          {0xFF10, 0xFF19}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0xFF66, 0xFFDC}, {0x10000, 0x10FFFF}};
}

inline bool in_ranges(const RangeSet& set, char32_t c) noexcept {
  std::size_t low = 0;
  std::size_t high = set.size();
  while (low < high) {
    const std::size_t middle = (low + high) / 2;
    if (c < set[middle].first)
      high = middle;
    else if (c > set[middle].second)
      low = middle + 1;
    else
      return true;
  }
  return false;
}

inline bool is_word(char32_t c) noexcept {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  static const RangeSet words = word_ranges();
  return in_ranges(words, c);
}

enum class Assertion { line_start, line_end, text_start, text_end, word_boundary, not_word_boundary };

/// The parsed pattern.
struct Node {
  enum class Kind { empty, literal, set, concat, alternate, repeat, assertion } kind = Kind::empty;
  char32_t literal = 0;
  bool fold = false;  // literal: match either case
  RangeSet ranges;    // set
  std::vector<Node> children;
  int min = 0;
  int max = -1;  // -1: unbounded
  bool greedy = true;
  Assertion assertion = Assertion::line_start;
};

class Parser {
 public:
  Parser(std::string_view pattern, const Options& options) : pattern_(pattern), options_(options) {}

  Node parse() {
    Flags flags{options_.case_insensitive, options_.dot_matches_newline, true};
    Node node = parse_alternation(flags, 0);
    if (position_ < pattern_.size()) fail("unopened group: this ')' closes nothing; escape it as \\)");
    return node;
  }

 private:
  struct Flags {
    bool case_insensitive;
    bool dot_all;
    bool multi_line;
  };

  static constexpr int max_nesting = 200;
  static constexpr int max_repetition = 1000;

  [[noreturn]] void fail(const std::string& message) const { throw SyntaxError(message, position_); }
  [[noreturn]] void fail_at(const std::string& message, std::size_t position) const {
    throw SyntaxError(message, position);
  }

  bool at_end() const noexcept { return position_ >= pattern_.size(); }
  char peek(std::size_t ahead = 0) const noexcept {
    return position_ + ahead < pattern_.size() ? pattern_[position_ + ahead] : '\0';
  }
  bool consume(char c) {
    if (!at_end() && pattern_[position_] == c) {
      ++position_;
      return true;
    }
    return false;
  }
  char32_t next_code_point() {
    const auto [value, length] = decode(pattern_, position_);
    if (value >= invalid_byte_base) fail("the pattern is not valid UTF-8");
    position_ += length;
    return value;
  }

  Node parse_alternation(Flags flags, int depth) {
    if (depth > max_nesting) fail("groups are nested too deeply");
    std::vector<Node> branches;
    branches.push_back(parse_concat(flags, depth));
    while (consume('|')) branches.push_back(parse_concat(flags, depth));
    if (branches.size() == 1) return std::move(branches.front());
    Node node;
    node.kind = Node::Kind::alternate;
    node.children = std::move(branches);
    return node;
  }

  Node parse_concat(Flags& flags, int depth) {
    Node node;
    node.kind = Node::Kind::concat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      std::optional<Node> atom = parse_atom(flags, depth);
      if (!atom) continue;  // a flag group such as (?i)
      node.children.push_back(parse_repetitions(std::move(*atom)));
    }
    if (node.children.size() == 1) return std::move(node.children.front());
    return node;
  }

  Node parse_repetitions(Node atom) {
    while (!at_end()) {
      int min = 0;
      int max = -1;
      if (consume('*')) {
      } else if (consume('+')) {
        min = 1;
      } else if (consume('?')) {
        max = 1;
      } else if (peek() == '{') {
        if (!parse_counted(min, max)) return atom;  // not a repetition: a literal '{' follows
      } else {
        return atom;
      }
      if (atom.kind == Node::Kind::assertion || atom.kind == Node::Kind::empty) {
        // Empty-width: repeated it is itself (at least once) or nothing (possibly none), as
        // in Rust's regex and RE2, which accept `(^)*` and `\b{2}`.
        consume('?');  // lazy or greedy, the same for what matches nothing
        if (min == 0) atom = Node{};
        continue;
      }
      Node repeat;
      repeat.kind = Node::Kind::repeat;
      repeat.min = min;
      repeat.max = max;
      repeat.greedy = !consume('?');
      repeat.children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  bool parse_counted(int& min, int& max) {
    const std::size_t start = position_;
    ++position_;  // '{'
    auto number = [&]() -> std::optional<int> {
      const std::size_t begin = position_;
      long value = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') {
        value = value * 10 + (peek() - '0');
        if (value > 100000) value = 100000;
        ++position_;
      }
      if (position_ == begin) return std::nullopt;
      return static_cast<int>(value);
    };
    const std::optional<int> low = number();
    std::optional<int> high = low;
    if (consume(',')) high = number();
    if (!consume('}') || (!low && !high)) {
      position_ = start;
      return false;
    }
    min = low.value_or(0);
    max = high ? *high : -1;
    if (min > max_repetition || max > max_repetition)
      fail_at("a counted repetition may not exceed " + std::to_string(max_repetition), start);
    if (max != -1 && max < min) fail_at("invalid repetition: the maximum is below the minimum", start);
    return true;
  }

  static Node literal_node(char32_t c, const Flags& flags) {
    Node node;
    node.kind = Node::Kind::literal;
    node.literal = c;
    node.fold = flags.case_insensitive && other_case(c) != c;
    return node;
  }
  static Node set_node(RangeSet ranges, const Flags& flags) {
    if (flags.case_insensitive) add_case_folds(ranges);
    normalize(ranges);
    Node node;
    node.kind = Node::Kind::set;
    node.ranges = std::move(ranges);
    return node;
  }
  static Node assertion_node(Assertion assertion) {
    Node node;
    node.kind = Node::Kind::assertion;
    node.assertion = assertion;
    return node;
  }

  std::optional<Node> parse_atom(Flags& flags, int depth) {
    const std::size_t start = position_;
    const char c = peek();
    switch (c) {
      case '(':
        return parse_group(flags, depth);
      case '[': {
        ++position_;
        return set_node(parse_class(depth, flags.case_insensitive), flags);
      }
      case '.': {
        ++position_;
        RangeSet any{{0, max_code_point}};
        if (!flags.dot_all) remove_code_point(any, '\n');
        return set_node(std::move(any), Flags{false, false, false});
      }
      case '^':
        ++position_;
        return assertion_node(flags.multi_line ? Assertion::line_start : Assertion::text_start);
      case '$':
        ++position_;
        return assertion_node(flags.multi_line ? Assertion::line_end : Assertion::text_end);
      case '*':
      case '+':
      case '?':
        fail_at("this repetition operator has nothing to repeat; escape it as \\" + std::string(1, c), start);
      case '\\':
        return parse_escape(flags);
      default:
        return literal_node(next_code_point(), flags);
    }
  }

  std::optional<Node> parse_group(Flags& flags, int depth) {
    const std::size_t open = position_;
    ++position_;  // '('
    Flags inner = flags;
    if (consume('?')) {
      if (peek() == '=' || peek() == '!' || (peek() == '<' && (peek(1) == '=' || peek(1) == '!')))
        fail_at(
            "look-ahead and look-behind are not supported (ripgrep's default regex engine has neither); "
            "match the surrounding text instead",
            open);
      if (peek() == 'P' && peek(1) == '<') position_ += 1;
      if (peek() == '<') {  // a named group: the name does not matter here
        const std::size_t close = pattern_.find('>', position_);
        if (close == std::string_view::npos) fail_at("unterminated group name", open);
        position_ = close + 1;
      } else {
        bool negate = false;
        while (true) {
          if (at_end()) fail_at("unterminated flag group", open);
          const char flag = pattern_[position_++];
          if (flag == '-')
            negate = true;
          else if (flag == 'i')
            inner.case_insensitive = !negate;
          else if (flag == 's')
            inner.dot_all = !negate;
          else if (flag == 'm')
            inner.multi_line = !negate;
          else if (flag == 'U' || flag == 'x' || flag == 'u' || flag == 'R')
            fail_at(std::string("the flag '") + flag + "' is not supported; only i, s and m are", position_ - 1);
          else if (flag == ')') {
            flags = inner;  // (?i) changes the rest of the enclosing group
            return std::nullopt;
          } else if (flag == ':') {
            break;
          } else {
            fail_at(std::string("unknown group flag '") + flag + "'", position_ - 1);
          }
        }
      }
    }
    Node node = parse_alternation(inner, depth + 1);
    if (!consume(')')) fail_at("unclosed group: this '(' has no matching ')'; escape it as \\(", open);
    return node;
  }

  /// Parses an escape outside a class.
  std::optional<Node> parse_escape(Flags& flags) {
    const std::size_t start = position_;
    ++position_;  // '\'
    if (at_end()) fail_at("the pattern ends with a lone backslash", start);
    const char c = pattern_[position_];
    switch (c) {
      case 'b':
        ++position_;
        return assertion_node(Assertion::word_boundary);
      case 'B':
        ++position_;
        return assertion_node(Assertion::not_word_boundary);
      case 'A':
        ++position_;
        return assertion_node(Assertion::text_start);
      case 'z':
        ++position_;
        return assertion_node(Assertion::text_end);
      default:
        break;
    }
    if (c >= '1' && c <= '9')
      fail_at(
          "backreferences (\\" + std::string(1, c) + ") are not supported (ripgrep's default regex engine has none)",
          start);
    RangeSet ranges;
    if (parse_class_escape(ranges)) return set_node(std::move(ranges), flags);
    position_ = start + 1;
    return literal_node(parse_escaped_literal(start), flags);
  }

  /// \d \D \w \W \s \S at the current position (after the backslash): fills `ranges`.
  bool parse_class_escape(RangeSet& ranges) {
    const char c = peek();
    RangeSet base;
    if (c == 'd' || c == 'D')
      base = digit_ranges();
    else if (c == 'w' || c == 'W')
      base = word_ranges();
    else if (c == 's' || c == 'S')
      base = space_ranges();
    else if (c == 'p' || c == 'P')
      fail("Unicode property classes (\\p{...}) are not supported; use an explicit class such as [a-zA-Z]");
    else
      return false;
    ++position_;
    if (c >= 'A' && c <= 'Z') base = complement(base);
    ranges.insert(ranges.end(), base.begin(), base.end());
    return true;
  }

  /// A single escaped character at the current position (after the backslash).
  char32_t parse_escaped_literal(std::size_t start) {
    const char c = pattern_[position_++];
    switch (c) {
      case 't':
        return '\t';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case 'a':
        return '\a';
      case 'e':
        return 0x1B;
      case '0':
        return 0;
      case 'x':
      case 'u':
      case 'U':
        return parse_hex(c, start);
      default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      fail_at(std::string("unrecognized escape sequence \\") + c, start);
    --position_;
    return next_code_point();  // escaped punctuation or any other character stands for itself
  }

  char32_t parse_hex(char kind, std::size_t start) {
    std::size_t digits = kind == 'x' ? 2 : kind == 'u' ? 4 : 8;
    const bool braced = consume('{');
    char32_t value = 0;
    std::size_t count = 0;
    while (!at_end() && (braced || count < digits)) {
      const char h = peek();
      int digit;
      if (h >= '0' && h <= '9')
        digit = h - '0';
      else if (h >= 'a' && h <= 'f')
        digit = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        digit = h - 'A' + 10;
      else
        break;
      value = value * 16 + static_cast<char32_t>(digit);
      if (value > max_code_point) fail_at("the escaped code point is beyond U+10FFFF", start);
      ++position_;
      ++count;
    }
    if (braced && !consume('}')) fail_at("unterminated \\x{...} escape", start);
    if (count == 0 || (!braced && count != digits)) fail_at("invalid hexadecimal escape", start);
    if (value >= 0xD800 && value <= 0xDFFF) fail_at("surrogate code points cannot be matched", start);
    return value;
  }

  /// Parses a bracketed class after its '['; returns its ranges (negation applied). With
  /// `fold`, each class is closed under case folding before it is negated, as in Rust's
  /// regex and RE2: `(?i)[^a]` matches neither 'a' nor 'A'.
  RangeSet parse_class(int depth, bool fold) {
    if (depth > max_nesting) fail("classes are nested too deeply");
    const std::size_t open = position_ - 1;
    const bool negated = consume('^');
    RangeSet ranges;
    bool first = true;
    while (true) {
      if (at_end()) fail_at("unclosed character class: this '[' has no matching ']'; escape it as \\[", open);
      const char c = peek();
      if (c == ']' && !first) {
        ++position_;
        break;
      }
      first = false;
      if (c == '[' && peek(1) == ':') {
        const std::size_t close = pattern_.find(":]", position_ + 2);
        if (close != std::string_view::npos) {
          std::string_view name = pattern_.substr(position_ + 2, close - position_ - 2);
          const bool posix_negated = !name.empty() && name.front() == '^';
          if (posix_negated) name.remove_prefix(1);
          RangeSet posix = posix_class(name);
          position_ = close + 2;
          if (posix_negated) {
            if (fold) add_case_folds(posix);
            posix = complement(posix);
          }
          ranges.insert(ranges.end(), posix.begin(), posix.end());
          continue;
        }
      }
      if (c == '[') {
        ++position_;
        const RangeSet nested = parse_class(depth + 1, fold);
        ranges.insert(ranges.end(), nested.begin(), nested.end());
        continue;
      }
      const std::optional<char32_t> low = parse_class_member(ranges);
      if (!low) continue;  // a class escape such as \d was added
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        const std::size_t dash = position_;
        ++position_;
        RangeSet ignored;
        const std::optional<char32_t> high = parse_class_member(ignored);
        if (!high) fail_at("a class escape cannot end a range", dash);
        if (*high < *low) fail_at("invalid class range: its end is before its start", dash);
        ranges.emplace_back(*low, *high);
      } else {
        ranges.emplace_back(*low, *low);
      }
    }
    if (fold) add_case_folds(ranges);
    normalize(ranges);
    return negated ? complement(ranges) : ranges;
  }

  /// One member of a class: a character (returned) or a class escape (added to ranges).
  std::optional<char32_t> parse_class_member(RangeSet& ranges) {
    if (peek() != '\\') return next_code_point();
    const std::size_t start = position_;
    ++position_;
    if (at_end()) fail_at("the pattern ends with a lone backslash", start);
    if (parse_class_escape(ranges)) return std::nullopt;
    return parse_escaped_literal(start);
  }

  RangeSet posix_class(std::string_view name) const {
    if (name == "alnum") return {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}};
    if (name == "alpha") return {{'A', 'Z'}, {'a', 'z'}};
    if (name == "ascii") return {{0, 0x7F}};
    if (name == "blank") return {{'\t', '\t'}, {' ', ' '}};
    if (name == "cntrl") return {{0, 0x1F}, {0x7F, 0x7F}};
    if (name == "digit") return {{'0', '9'}};
    if (name == "graph") return {{'!', '~'}};
    if (name == "lower") return {{'a', 'z'}};
    if (name == "print") return {{' ', '~'}};
    if (name == "punct") return {{'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'}};
    if (name == "space") return {{'\t', '\r'}, {' ', ' '}};
    if (name == "upper") return {{'A', 'Z'}};
    if (name == "word") return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    if (name == "xdigit") return {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
    fail("unknown POSIX class [:" + std::string(name) + ":]");
  }

  std::string_view pattern_;
  Options options_;
  std::size_t position_ = 0;
};

/// A literal every match contains (or starts with), found without the automaton.
class LiteralSearch {
 public:
  LiteralSearch() = default;
  /// `folds`: ASCII letters match in either case.
  LiteralSearch(std::string text, bool folds) : text_(std::move(text)), folds_(folds) {
    // Anchor the scan on the byte least likely to occur in source text, so that the scan
    // stops rarely; a letter costs two scans when case is folded, so prefer other bytes.
    int best = 1 << 30;
    for (std::size_t i = 0; i < text_.size(); ++i) {
      const int score = commonness(static_cast<unsigned char>(text_[i])) + (folds_ && is_letter(text_[i]) ? 60 : 0);
      if (score < best) {
        best = score;
        rare_ = i;
      }
    }
  }

  [[nodiscard]] bool empty() const noexcept { return text_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return text_.size(); }

  /// Where the literal next occurs at or after `from`, or npos.
  [[nodiscard]] std::size_t find(std::string_view haystack, std::size_t from) const noexcept {
    if (from > haystack.size() || haystack.size() - from < text_.size()) return std::string_view::npos;
    if (text_.empty()) return from;
    if (!folds_) {
      // memmem (two-way with vector scans) does not stop at every occurrence of the
      // first character, which in source code is often a common letter.
      const void* hit = ::memmem(haystack.data() + from, haystack.size() - from, text_.data(), text_.size());
      return hit == nullptr ? std::string_view::npos
                            : static_cast<std::size_t>(static_cast<const char*>(hit) - haystack.data());
    }
    const char rare = text_[rare_];
    const char lower = to_lower(rare);
    const char upper = is_letter(rare) ? static_cast<char>(lower - 32) : lower;
    const std::size_t last_start = haystack.size() - text_.size();
    std::size_t scan = from + rare_;
    while (scan <= last_start + rare_) {
      const char* base = haystack.data() + scan;
      const std::size_t span = last_start + rare_ + 1 - scan;
      const char* hit = static_cast<const char*>(std::memchr(base, lower, span));
      if (upper != lower) {
        const char* other =
            static_cast<const char*>(std::memchr(base, upper, hit ? static_cast<std::size_t>(hit - base) : span));
        if (other != nullptr) hit = other;
      }
      if (hit == nullptr) return std::string_view::npos;
      const std::size_t start = static_cast<std::size_t>(hit - haystack.data()) - rare_;
      std::size_t k = 0;
      while (k < text_.size() && to_lower(haystack[start + k]) == to_lower(text_[k])) ++k;
      if (k == text_.size()) return start;
      scan = start + rare_ + 1;
    }
    return std::string_view::npos;
  }

 private:
  static bool is_letter(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
  static char to_lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
  /// A rough rank of how often a byte appears in source code: lower is rarer.
  static int commonness(unsigned char c) noexcept {
    static constexpr std::string_view letters_rare_to_common = "zqjxkvbywgpfmhucdlrsnioate";
    if (c >= 'a' && c <= 'z') return 40 + static_cast<int>(letters_rare_to_common.find(static_cast<char>(c)));
    if (c >= 'A' && c <= 'Z') return 20 + static_cast<int>(letters_rare_to_common.find(static_cast<char>(c + 32))) / 2;
    if (c == ' ' || c == '\t') return 100;
    if (c >= '0' && c <= '9') return 30;
    if (c == '_' || c == '(' || c == ')' || c == ',' || c == ';' || c == '.' || c == '=') return 35;
    return 10;
  }

  std::string text_;
  bool folds_ = false;
  std::size_t rare_ = 0;
};

/// Threads of the simulation: one per instruction at most, in priority order.
struct ThreadList {
  std::vector<std::uint32_t> dense;   // program counters, in priority order
  std::vector<std::size_t> starts;    // the start of the match each thread is building
  std::vector<std::uint32_t> sparse;  // index into dense, for membership
  void prepare(std::size_t size) {
    if (sparse.size() < size) sparse.assign(size, 0);
    dense.reserve(size);
    starts.reserve(size);
    clear();
  }
  [[nodiscard]] bool contains(std::uint32_t pc) const noexcept {
    const std::uint32_t index = sparse[pc];
    return index < dense.size() && dense[index] == pc;
  }
  void insert(std::uint32_t pc, std::size_t start) {
    sparse[pc] = static_cast<std::uint32_t>(dense.size());
    dense.push_back(pc);
    starts.push_back(start);
  }
  void clear() noexcept {
    dense.clear();
    starts.clear();
  }
};

/// The working memory of a search, kept between searches so that repeated ones (a match
/// per line of a file) do not allocate. One per thread.
struct Scratch {
  ThreadList current;
  ThreadList next;
  std::vector<std::uint32_t> stack;
};

/// A compiled pattern.
class Regex {
 public:
  /// Throws SyntaxError.
  explicit Regex(std::string_view pattern, Options options = {}) : options_(options) {
    Node root = Parser(pattern, options).parse();
    extract_literals(root);
    compile(root, 0);
    emit({Op::match});
    compute_first_bytes();
  }

  /// The leftmost-first match that starts at or after `from`, if any.
  [[nodiscard]] std::optional<Match> find(std::string_view text, std::size_t from = 0) const {
    Scratch scratch;
    return find(text, from, scratch);
  }

  /// The same, reusing `scratch` from earlier searches.
  [[nodiscard]] std::optional<Match> find(std::string_view text, std::size_t from, Scratch& scratch) const {
    if (!options_.line_oriented || required_.empty()) return run(text, from, false, scratch);
    // Every match lies within one line and contains the required literal: only lines that
    // contain it need the automaton, and they are found at memchr speed.
    while (from <= text.size()) {
      const std::size_t hit = required_.find(text, from);
      if (hit == std::string_view::npos) return std::nullopt;
      const std::size_t newline_before = hit == 0 ? std::string_view::npos : text.rfind('\n', hit - 1);
      const std::size_t line_start = std::max(from, newline_before == std::string_view::npos ? 0 : newline_before + 1);
      std::size_t line_end = text.find('\n', hit);
      if (line_end == std::string_view::npos) line_end = text.size();
      if (std::optional<Match> match = run(text.substr(0, line_end), line_start, false, scratch)) return match;
      from = line_end + 1;
    }
    return std::nullopt;
  }

  /// Whether the pattern matches anywhere in `text`.
  [[nodiscard]] bool search(std::string_view text) const {
    Scratch scratch;
    if (options_.line_oriented && !required_.empty()) return find(text, 0, scratch).has_value();
    return run(text, 0, true, scratch).has_value();
  }

  [[nodiscard]] std::size_t program_size() const noexcept { return program_.size(); }

  /// Programs above this many instructions are refused: matching costs time in
  /// proportion to the program's size for every byte of input.
  static constexpr std::size_t max_program_size = 100'000;

 private:
  enum class Op : std::uint8_t { set, split, jump, assertion, match };
  struct Instruction {
    Op op;
    std::uint32_t x = 0;  // set: index into sets_; split/jump: target; assertion: kind
    std::uint32_t y = 0;  // split: lower-priority target
  };
  struct CompiledSet {
    RangeSet ranges;
    std::uint64_t ascii_low = 0;   // bitmap of 0..63
    std::uint64_t ascii_high = 0;  // bitmap of 64..127
    [[nodiscard]] bool contains(char32_t c) const noexcept {
      if (c < 64) return (ascii_low >> c) & 1u;
      if (c < 128) return (ascii_high >> (c - 64)) & 1u;
      return in_ranges(ranges, c);
    }
  };

  std::uint32_t emit(Instruction instruction) {
    if (program_.size() >= max_program_size)
      throw SyntaxError("the pattern is too large once its repetitions are expanded (more than " +
                            std::to_string(max_program_size) + " steps); simplify counted repetitions such as {500}",
                        0);
    program_.push_back(instruction);
    return static_cast<std::uint32_t>(program_.size() - 1);
  }

  std::uint32_t add_set(RangeSet ranges) {
    if (options_.line_oriented) remove_code_point(ranges, '\n');
    CompiledSet set;
    for (const Range& range : ranges)
      for (char32_t c = range.first; c <= std::min<char32_t>(range.second, 127); ++c) {
        if (c < 64)
          set.ascii_low |= std::uint64_t{1} << c;
        else
          set.ascii_high |= std::uint64_t{1} << (c - 64);
      }
    set.ranges = std::move(ranges);
    sets_.push_back(std::move(set));
    return static_cast<std::uint32_t>(sets_.size() - 1);
  }

  void compile(const Node& node, int depth) {
    switch (node.kind) {
      case Node::Kind::empty:
        return;
      case Node::Kind::literal: {
        if (options_.line_oriented && node.literal == '\n')
          throw SyntaxError(
              "the pattern contains a newline, which cannot match in line-by-line search; set "
              "multiline to true to match across lines",
              0);
        RangeSet ranges{{node.literal, node.literal}};
        if (node.fold) ranges.emplace_back(other_case(node.literal), other_case(node.literal));
        normalize(ranges);
        emit({Op::set, add_set(std::move(ranges))});
        return;
      }
      case Node::Kind::set:
        emit({Op::set, add_set(node.ranges)});
        return;
      case Node::Kind::assertion:
        emit({Op::assertion, static_cast<std::uint32_t>(node.assertion)});
        return;
      case Node::Kind::concat:
        for (const Node& child : node.children) compile(child, depth + 1);
        return;
      case Node::Kind::alternate: {
        std::vector<std::uint32_t> exits;
        for (std::size_t i = 0; i < node.children.size(); ++i) {
          if (i + 1 == node.children.size()) {
            compile(node.children[i], depth + 1);
            break;
          }
          const std::uint32_t split = emit({Op::split});
          program_[split].x = static_cast<std::uint32_t>(program_.size());
          compile(node.children[i], depth + 1);
          exits.push_back(emit({Op::jump}));
          program_[split].y = static_cast<std::uint32_t>(program_.size());
        }
        for (const std::uint32_t exit : exits) program_[exit].x = static_cast<std::uint32_t>(program_.size());
        return;
      }
      case Node::Kind::repeat:
        compile_repeat(node, depth);
        return;
    }
  }

  /// A split whose preferred branch depends on greediness: `taken` continues the
  /// repetition, `skipped` leaves it.
  void set_split(std::uint32_t split, std::uint32_t taken, std::uint32_t skipped, bool greedy) {
    program_[split].x = greedy ? taken : skipped;
    program_[split].y = greedy ? skipped : taken;
  }

  void compile_repeat(const Node& node, int depth) {
    const Node& child = node.children.front();
    if (node.max == -1 && node.min > 0) {  // e{n,}: n-1 copies, then e+ (the last copy loops)
      for (int i = 0; i + 1 < node.min; ++i) compile(child, depth + 1);
      const auto body = static_cast<std::uint32_t>(program_.size());
      compile(child, depth + 1);
      const std::uint32_t split = emit({Op::split});
      set_split(split, body, split + 1, node.greedy);
      return;
    }
    if (node.max == -1) {  // e* as (e+)?, so that an e that prefers the empty match ends it
      // there: (|a)* matches what (|a)+ matches, as in Rust's regex, RE2 and Go since 2021.
      const std::uint32_t optional = emit({Op::split});
      const auto body = static_cast<std::uint32_t>(program_.size());
      compile(child, depth + 1);
      const std::uint32_t loop = emit({Op::split});
      set_split(loop, body, loop + 1, node.greedy);
      set_split(optional, body, static_cast<std::uint32_t>(program_.size()), node.greedy);
      return;
    }
    for (int i = 0; i < node.min; ++i) compile(child, depth + 1);
    std::vector<std::uint32_t> splits;  // e{n,m}: m-n optional copies, each may end the repetition
    for (int i = node.min; i < node.max; ++i) {
      splits.push_back(emit({Op::split}));
      program_[splits.back()].x = static_cast<std::uint32_t>(program_.size());
      compile(child, depth + 1);
    }
    const auto end = static_cast<std::uint32_t>(program_.size());
    for (const std::uint32_t split : splits) set_split(split, program_[split].x, end, node.greedy);
  }

  /// The bytes a match can start with (the lead bytes of the code points the first
  /// consuming steps accept), unless the pattern can match the empty string.
  void compute_first_bytes() {
    std::vector<char> visited(program_.size(), 0);
    std::vector<std::uint32_t> stack{0};
    first_bytes_.fill(false);
    while (!stack.empty()) {
      const std::uint32_t pc = stack.back();
      stack.pop_back();
      if (visited[pc]) continue;
      visited[pc] = 1;
      const Instruction& instruction = program_[pc];
      switch (instruction.op) {
        case Op::match:
          return;  // an empty match is possible: every position can start one
        case Op::jump:
          stack.push_back(instruction.x);
          break;
        case Op::split:
          stack.push_back(instruction.x);
          stack.push_back(instruction.y);
          break;
        case Op::assertion:
          stack.push_back(pc + 1);
          break;  // zero-width: look past it
        case Op::set:
          for (const Range& range : sets_[instruction.x].ranges) {
            for (char32_t c = range.first; c <= std::min<char32_t>(range.second, 0x7F); ++c) first_bytes_[c] = true;
            if (range.second >= 0x80)  // any multi-byte character: all lead bytes
              for (std::size_t lead = 0xC2; lead <= 0xF4; ++lead) first_bytes_[lead] = true;
          }
          break;
      }
    }
    has_first_bytes_ = true;
  }

  /// Finds literal text every match must contain: the leading run of literals of the
  /// top-level sequence (after zero-width assertions), where every match starts, and
  /// the longest run anywhere in it.
  void extract_literals(const Node& root) {
    std::vector<const Node*> sequence;
    if (root.kind == Node::Kind::concat)
      for (const Node& child : root.children) sequence.push_back(&child);
    else
      sequence.push_back(&root);
    const auto usable = [&](const Node& node) {
      return node.kind == Node::Kind::literal && node.literal < 0x80 &&
             !(node.literal == '\n' && options_.line_oriented);
    };
    std::size_t i = 0;
    while (i < sequence.size() && sequence[i]->kind == Node::Kind::assertion) ++i;
    std::string prefix;
    bool prefix_folds = false;
    for (; i < sequence.size() && usable(*sequence[i]); ++i) {
      prefix += static_cast<char>(sequence[i]->literal);
      prefix_folds = prefix_folds || sequence[i]->fold;
    }
    prefix_ = LiteralSearch(prefix, prefix_folds);
    std::string longest;
    bool longest_folds = false;
    std::string current;
    bool current_folds = false;
    const auto finish_run = [&] {
      if (current.size() > longest.size()) {
        longest = current;
        longest_folds = current_folds;
      }
      current.clear();
      current_folds = false;
    };
    for (const Node* node : sequence) {
      if (usable(*node)) {
        current += static_cast<char>(node->literal);
        current_folds = current_folds || node->fold;
      } else {
        finish_run();
      }
    }
    finish_run();
    required_ = LiteralSearch(longest, longest_folds);
  }

  [[nodiscard]] bool holds(Assertion assertion, std::string_view text, std::size_t at) const noexcept {
    switch (assertion) {
      case Assertion::line_start:
        return at == 0 || text[at - 1] == '\n';
      case Assertion::line_end:
        return at == text.size() || text[at] == '\n';
      case Assertion::text_start:
        return at == 0;
      case Assertion::text_end:
        return at == text.size();
      case Assertion::word_boundary:
      case Assertion::not_word_boundary: {
        const bool before = at > 0 && is_word(decode_before(text, at));
        const bool after = at < text.size() && is_word(decode(text, at).first);
        return (before != after) == (assertion == Assertion::word_boundary);
      }
    }
    return false;
  }

  /// Adds `pc` and everything reachable from it without consuming input at `at`.
  void add_thread(ThreadList& list, std::vector<std::uint32_t>& stack, std::uint32_t pc, std::size_t start,
                  std::string_view text, std::size_t at) const {
    stack.clear();
    stack.push_back(pc);
    while (!stack.empty()) {
      const std::uint32_t current = stack.back();
      stack.pop_back();
      if (list.contains(current)) continue;
      list.insert(current, start);
      const Instruction& instruction = program_[current];
      switch (instruction.op) {
        case Op::jump:
          stack.push_back(instruction.x);
          break;
        case Op::split:
          stack.push_back(instruction.y);
          stack.push_back(instruction.x);
          break;
        case Op::assertion:
          if (holds(static_cast<Assertion>(instruction.x), text, at)) stack.push_back(current + 1);
          break;
        case Op::set:
        case Op::match:
          break;
      }
    }
  }

  [[nodiscard]] std::optional<Match> run(std::string_view text, std::size_t from, bool first_match_only,
                                         Scratch& scratch) const {
    ThreadList& current = scratch.current;
    ThreadList& next = scratch.next;
    std::vector<std::uint32_t>& stack = scratch.stack;
    current.prepare(program_.size());
    next.prepare(program_.size());
    stack.reserve(program_.size());
    std::optional<Match> found;
    std::size_t at = from;
    while (true) {
      if (!found) {
        if (current.dense.empty() && !prefix_.empty()) {
          const std::size_t candidate = prefix_.find(text, at);
          if (candidate == std::string_view::npos) break;
          at = candidate;
        } else if (current.dense.empty() && has_first_bytes_) {
          // No thread is alive: skip to the next byte that can start a match.
          while (at < text.size() && !first_bytes_[static_cast<unsigned char>(text[at])]) ++at;
          if (at == text.size()) break;
        }
        add_thread(current, stack, 0, at, text, at);
      }
      if (current.dense.empty()) break;
      char32_t c = 0;
      std::size_t length = 0;
      if (at < text.size()) {
        const auto decoded = decode(text, at);
        c = decoded.first;
        length = decoded.second;
      }
      for (std::size_t i = 0; i < current.dense.size(); ++i) {
        const std::uint32_t pc = current.dense[i];
        const Instruction& instruction = program_[pc];
        if (instruction.op == Op::match) {
          found = Match{current.starts[i], at};
          if (first_match_only) return found;
          break;  // threads of lower priority cannot win any more
        }
        if (instruction.op == Op::set && length != 0 && sets_[instruction.x].contains(c))
          add_thread(next, stack, pc + 1, current.starts[i], text, at + length);
      }
      if (at >= text.size()) break;
      std::swap(current, next);
      next.clear();
      at += length;
      if (found && current.dense.empty()) break;
    }
    return found;
  }

  Options options_;
  std::vector<Instruction> program_;
  std::vector<CompiledSet> sets_;
  LiteralSearch prefix_;
  LiteralSearch required_;
  std::array<bool, 256> first_bytes_{};
  bool has_first_bytes_ = false;
};

}  // namespace cuda_agent::detail::regex
