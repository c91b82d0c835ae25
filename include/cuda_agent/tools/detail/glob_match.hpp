// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Glob patterns as ripgrep and shells write them: `*` (within one path component),
/// `**` (any number of components), `?`, `[a-z]`, `[!x]`, `{a,b}` and `\` escapes.
/// Matching simulates the pattern over a set of positions, so it is linear in the path
/// for each token however many stars the pattern has.

#include <algorithm>    // fill
#include <cstddef>      // size_t
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // pair, move
#include <vector>       // vector

#include "cuda_agent/tools/detail/tool_failure.hpp"

namespace cuda_agent::detail {

class GlobPattern {
 public:
  /// Throws ToolFailure when braces expand to too many alternatives.
  explicit GlobPattern(std::string_view pattern) : text_(pattern) {
    std::vector<std::string> expanded;
    expand_braces(std::string(pattern), expanded);
    for (const std::string& each : expanded) alternatives_.push_back(tokenize(each));
    has_slash_ = pattern.find('/') != std::string_view::npos;
  }

  /// Whether `path` (components separated by '/', no leading slash) matches as a whole.
  [[nodiscard]] bool matches(std::string_view path) const {
    for (const auto& tokens : alternatives_)
      if (matches(tokens, path)) return true;
    return false;
  }

  /// Patterns without '/' are matched against file names only, as gitignore and
  /// ripgrep's --glob do.
  [[nodiscard]] bool matches_file(std::string_view relative_path) const {
    if (has_slash_) return matches(relative_path);
    const std::size_t slash = relative_path.rfind('/');
    return matches(slash == std::string_view::npos ? relative_path : relative_path.substr(slash + 1));
  }

  [[nodiscard]] bool has_slash() const noexcept { return has_slash_; }
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

 private:
  enum class Kind { literal, any_char, star, globstar, globstar_slash, char_class };
  struct Token {
    Kind kind;
    char literal = 0;
    bool negated = false;
    std::vector<std::pair<unsigned char, unsigned char>> ranges;
  };

  static constexpr std::size_t max_alternatives = 1024;

  static Token make(Kind kind, char literal = 0) {
    Token token;
    token.kind = kind;
    token.literal = literal;
    return token;
  }

  static void expand_braces(const std::string& pattern, std::vector<std::string>& out) {
    // Find the first '{' that has a matching '}' with a top-level ',' between them.
    for (std::size_t open = 0; open < pattern.size(); ++open) {
      if (pattern[open] == '\\') {
        ++open;
        continue;
      }
      if (pattern[open] != '{') continue;
      int depth = 0;
      std::vector<std::size_t> commas;
      std::size_t close = std::string::npos;
      for (std::size_t i = open; i < pattern.size(); ++i) {
        if (pattern[i] == '\\') {
          ++i;
          continue;
        }
        if (pattern[i] == '{')
          ++depth;
        else if (pattern[i] == '}' && --depth == 0) {
          close = i;
          break;
        } else if (pattern[i] == ',' && depth == 1) {
          commas.push_back(i);
        }
      }
      if (close == std::string::npos) return out.push_back(pattern);  // unbalanced: literal braces
      const std::string prefix = pattern.substr(0, open);
      const std::string suffix = pattern.substr(close + 1);
      std::size_t start = open + 1;
      commas.push_back(close);
      for (const std::size_t end : commas) {
        expand_braces(prefix + pattern.substr(start, end - start) + suffix, out);
        if (out.size() > max_alternatives)
          throw ToolFailure("The glob pattern has too many {a,b} alternatives (more than " +
                            std::to_string(max_alternatives) + ").");
        start = end + 1;
      }
      return;
    }
    out.push_back(pattern);
  }

  static std::vector<Token> tokenize(std::string_view pattern) {
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      const char c = pattern[i];
      if (c == '\\' && i + 1 < pattern.size()) {
        tokens.push_back(make(Kind::literal, pattern[++i]));
      } else if (c == '*') {
        std::size_t stars = 1;
        while (i + stars < pattern.size() && pattern[i + stars] == '*') ++stars;
        const bool starts_component = i == 0 || pattern[i - 1] == '/';
        const std::size_t after = i + stars;
        i = after - 1;
        if (stars >= 2 && starts_component && after == pattern.size()) {
          tokens.push_back(make(Kind::globstar));
        } else if (stars >= 2 && starts_component && pattern[after] == '/') {
          tokens.push_back(make(Kind::globstar_slash));
          ++i;  // the slash belongs to the token
        } else {
          tokens.push_back(make(Kind::star));
        }
      } else if (c == '?') {
        tokens.push_back(make(Kind::any_char));
      } else if (c == '[') {
        Token token = make(Kind::char_class);
        std::size_t j = i + 1;
        if (j < pattern.size() && (pattern[j] == '!' || pattern[j] == '^')) {
          token.negated = true;
          ++j;
        }
        bool closed = false;
        for (bool first = true; j < pattern.size(); first = false) {
          if (pattern[j] == ']' && !first) {
            closed = true;
            break;
          }
          unsigned char low = static_cast<unsigned char>(pattern[j]);
          if (low == '\\' && j + 1 < pattern.size()) low = static_cast<unsigned char>(pattern[++j]);
          unsigned char high = low;
          if (j + 2 < pattern.size() && pattern[j + 1] == '-' && pattern[j + 2] != ']') {
            high = static_cast<unsigned char>(pattern[j + 2]);
            j += 2;
          }
          token.ranges.emplace_back(low, high);
          ++j;
        }
        if (!closed) {
          tokens.push_back(make(Kind::literal, '['));
        } else {
          tokens.push_back(std::move(token));
          i = j;
        }
      } else {
        tokens.push_back(make(Kind::literal, c));
      }
    }
    return tokens;
  }

  static bool in_class(const Token& token, char c) {
    const auto byte = static_cast<unsigned char>(c);
    bool found = false;
    for (const auto& [low, high] : token.ranges) found = found || (byte >= low && byte <= high);
    return found != token.negated;
  }

  static bool matches(const std::vector<Token>& tokens, std::string_view path) {
    const std::size_t n = path.size();
    std::vector<char> current(n + 1, 0);
    std::vector<char> next(n + 1, 0);
    current[0] = 1;
    for (const Token& token : tokens) {
      std::fill(next.begin(), next.end(), 0);
      bool any = false;
      for (std::size_t j = 0; j <= n; ++j) {
        if (!current[j]) continue;
        switch (token.kind) {
          case Kind::literal:
            if (j < n && path[j] == token.literal) next[j + 1] = 1;
            break;
          case Kind::any_char:
            if (j < n && path[j] != '/') next[j + 1] = 1;
            break;
          case Kind::char_class:
            if (j < n && path[j] != '/' && in_class(token, path[j])) next[j + 1] = 1;
            break;
          case Kind::star:
            for (std::size_t k = j;; ++k) {
              next[k] = 1;
              if (k == n || path[k] == '/') break;
            }
            break;
          case Kind::globstar:
            for (std::size_t k = j; k <= n; ++k) next[k] = 1;
            break;
          case Kind::globstar_slash:
            next[j] = 1;
            for (std::size_t k = j + 1; k <= n; ++k)
              if (path[k - 1] == '/') next[k] = 1;
            break;
        }
      }
      for (const char reached : next) any = any || reached;
      if (!any) return false;
      current.swap(next);
    }
    return current[n] != 0;
  }

  std::string text_;
  std::vector<std::vector<Token>> alternatives_;
  bool has_slash_ = false;
};

/// A set of ripgrep-style file filters: patterns separated by whitespace or top-level
/// commas; a leading '!' excludes. A file passes when it matches some including
/// pattern (or there is none) and no excluding one.
class GlobFilter {
 public:
  GlobFilter() = default;
  explicit GlobFilter(std::string_view text) {
    std::string current;
    int depth = 0;
    const auto flush = [&] {
      if (current.empty()) return;
      std::string_view pattern = current;
      bool exclude = false;
      if (pattern.front() == '!') {
        exclude = true;
        pattern.remove_prefix(1);
      }
      if (!pattern.empty() && pattern.front() == '/') pattern.remove_prefix(1);  // anchored to the search root
      if (!pattern.empty()) (exclude ? exclude_ : include_).emplace_back(pattern);
      current.clear();
    };
    for (const char c : text) {
      if (c == '{') ++depth;
      if (c == '}' && depth > 0) --depth;
      if ((c == ' ' || c == '\t' || c == '\n' || (c == ',' && depth == 0))) {
        flush();
        continue;
      }
      current += c;
    }
    flush();
  }

  [[nodiscard]] bool empty() const noexcept { return include_.empty() && exclude_.empty(); }

  /// `relative_path` is relative to the directory being searched.
  [[nodiscard]] bool admits(std::string_view relative_path) const {
    for (const GlobPattern& pattern : exclude_)
      if (pattern.matches_file(relative_path)) return false;
    if (include_.empty()) return true;
    for (const GlobPattern& pattern : include_)
      if (pattern.matches_file(relative_path)) return true;
    return false;
  }

 private:
  std::vector<GlobPattern> include_;
  std::vector<GlobPattern> exclude_;
};

}  // namespace cuda_agent::detail
