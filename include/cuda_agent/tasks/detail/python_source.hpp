// SPDX-License-Identifier: Apache-2.0
#pragma once

// Just enough of Python's lexical structure to read a task module without running it:
// logical lines (joined across brackets, backslashes and triple-quoted strings, comments
// dropped), the top-level definitions, `Model.__init__`'s parameters, and the values of
// module-level constants such as `batch_size = 16 * 2` or `kernel_size = (3, 5)`.
// Running the module is the harness's job; the loader only needs its shape.

#include <algorithm>    // min
#include <cctype>       // isalnum, isalpha, isdigit, isspace
#include <cmath>        // pow, floor, fmod
#include <cstddef>      // size_t
#include <optional>     // optional
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

namespace cuda_agent::detail::python {

/// One logical line: its 1-based first physical line, its indentation (columns, tabs
/// counted as 8), and its code with comments removed and continuations joined by spaces.
/// String literals are kept verbatim.
struct LogicalLine {
  int line = 0;
  int indentation = 0;
  std::string code;
};

[[nodiscard]] inline bool is_identifier_start(char c) noexcept {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
[[nodiscard]] inline bool is_identifier_char(char c) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

/// Length of the string literal starting at `at` (which holds a quote, possibly after a
/// prefix already skipped), or npos if it does not close before the end.
[[nodiscard]] inline std::size_t string_literal_length(std::string_view text, std::size_t at) noexcept {
  const char quote = text[at];
  const bool triple = text.substr(at, 3) == std::string_view(std::string(3, quote));
  const std::size_t open = triple ? 3 : 1;
  for (std::size_t i = at + open; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
      continue;
    }
    if (!triple && text[i] == '\n') return std::string_view::npos;
    if (text[i] != quote) continue;
    if (!triple) return i + 1 - at;
    if (text.substr(i, 3) == std::string_view(std::string(3, quote))) return i + 3 - at;
  }
  return std::string_view::npos;
}

/// Splits a module into logical lines. Unterminated strings end the scan quietly: the
/// loader then reports what it could not find.
[[nodiscard]] inline std::vector<LogicalLine> logical_lines(std::string_view text) {
  std::vector<LogicalLine> lines;
  LogicalLine current;
  int depth = 0;
  int physical_line = 1;
  bool at_line_start = true;
  int column = 0;

  auto finish = [&] {
    const auto last = current.code.find_last_not_of(' ');
    current.code.erase(last == std::string::npos ? 0 : last + 1);
    if (!current.code.empty()) lines.push_back(std::move(current));
    current = LogicalLine{};
    at_line_start = true;
    column = 0;
  };

  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (at_line_start) {
      if (c == ' ') {
        ++column;
        continue;
      }
      if (c == '\t') {
        column = (column / 8 + 1) * 8;
        continue;
      }
      if (c == '\f') continue;
      at_line_start = false;
      current.line = physical_line;
      current.indentation = column;
    }
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      ++i;
      ++physical_line;
      current.code += ' ';
      continue;
    }
    if (c == '\n') {
      ++physical_line;
      if (depth > 0) {
        current.code += ' ';
        continue;
      }
      finish();
      continue;
    }
    if (c == '"' || c == '\'') {
      const std::size_t length = string_literal_length(text, i);
      if (length == std::string_view::npos) break;
      const std::string_view literal = text.substr(i, length);
      for (const char inner : literal)
        if (inner == '\n') ++physical_line;
      current.code += literal;
      i += length - 1;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    if (c == '\r') continue;
    current.code += (c == '\t' ? ' ' : c);
  }
  finish();
  return lines;
}

/// Splits `text` at `separator` characters that are outside brackets and strings.
[[nodiscard]] inline std::vector<std::string> split_top_level(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      const std::size_t length = string_literal_length(text, i);
      const std::size_t taken = length == std::string_view::npos ? text.size() - i : length;
      current += text.substr(i, taken);
      i += taken - 1;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == separator && depth == 0) {
      parts.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += c;
  }
  parts.push_back(std::move(current));
  return parts;
}

/// The text between the bracket at `open` and its partner (to the end if unclosed).
[[nodiscard]] inline std::string bracketed(std::string_view text, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      const std::size_t length = string_literal_length(text, i);
      if (length == std::string_view::npos) break;
      i += length - 1;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && --depth == 0) return std::string(text.substr(open + 1, i - open - 1));
  }
  return std::string(text.substr(std::min(open + 1, text.size())));
}

[[nodiscard]] inline std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

[[nodiscard]] inline bool is_identifier(std::string_view text) noexcept {
  if (text.empty() || !is_identifier_start(text[0])) return false;
  for (const char c : text)
    if (!is_identifier_char(c)) return false;
  return true;
}

/// Evaluates the small expressions task modules use for their sizes: numbers, strings,
/// True/False/None, names bound earlier, + - * / // % **, unary minus, parentheses,
/// tuples and lists (and `[x] * n`). Anything else yields nullopt.
class ConstantEvaluator {
 public:
  explicit ConstantEvaluator(const nlohmann::json& known) : known_(known) {}

  [[nodiscard]] std::optional<nlohmann::json> evaluate(std::string_view expression) {
    text_ = expression;
    at_ = 0;
    failed_ = false;
    nlohmann::json value = parse_tuple_or_expression(/*top_level=*/true);
    skip_space();
    if (failed_ || at_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  void skip_space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_])) != 0) ++at_;
  }
  bool accept(std::string_view token) {
    skip_space();
    if (text_.substr(at_, token.size()) != token) return false;
    at_ += token.size();
    return true;
  }
  nlohmann::json fail() {
    failed_ = true;
    return nullptr;
  }

  // expression (',' expression)* [','] : a bare tuple at the top level.
  nlohmann::json parse_tuple_or_expression(bool top_level) {
    nlohmann::json first = parse_sum();
    if (failed_) return nullptr;
    skip_space();
    if (!top_level || at_ >= text_.size() || text_[at_] != ',') return first;
    nlohmann::json items = nlohmann::json::array({first});
    while (accept(",")) {
      skip_space();
      if (at_ >= text_.size()) break;
      items.push_back(parse_sum());
      if (failed_) return nullptr;
    }
    return items;
  }

  static bool is_number(const nlohmann::json& value) { return value.is_number(); }

  nlohmann::json arithmetic(const nlohmann::json& left, const nlohmann::json& right, std::string_view op) {
    if (op == "+" && left.is_array() && right.is_array()) {
      nlohmann::json joined = left;
      for (const auto& item : right) joined.push_back(item);
      return joined;
    }
    if (op == "+" && left.is_string() && right.is_string()) return left.get<std::string>() + right.get<std::string>();
    if (op == "*" && (left.is_array() || right.is_array())) {
      const nlohmann::json& list = left.is_array() ? left : right;
      const nlohmann::json& count = left.is_array() ? right : left;
      if (!count.is_number_integer() || count.get<long long>() > 1'000'000) return fail();
      nlohmann::json repeated = nlohmann::json::array();
      for (long long i = 0; i < count.get<long long>(); ++i)
        for (const auto& item : list) repeated.push_back(item);
      return repeated;
    }
    if (!is_number(left) || !is_number(right)) return fail();
    const bool integers = left.is_number_integer() && right.is_number_integer();
    const double a = left.get<double>();
    const double b = right.get<double>();
    if (integers) {
      const long long x = left.get<long long>();
      const long long y = right.get<long long>();
      if (op == "+") return x + y;
      if (op == "-") return x - y;
      if (op == "*") return x * y;
      if (op == "//" || op == "%") {
        if (y == 0) return fail();
        long long quotient = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --quotient;  // Python floors
        return op == "//" ? nlohmann::json(quotient) : nlohmann::json(x - quotient * y);
      }
      if (op == "**" && y >= 0) {
        long long result = 1;
        for (long long i = 0; i < y && i < 64; ++i) result *= x;
        return result;
      }
    }
    if (op == "+") return a + b;
    if (op == "-") return a - b;
    if (op == "*") return a * b;
    if (op == "/") return b == 0 ? fail() : nlohmann::json(a / b);
    if (op == "//") return b == 0 ? fail() : nlohmann::json(std::floor(a / b));
    if (op == "%") return b == 0 ? fail() : nlohmann::json(a - std::floor(a / b) * b);
    if (op == "**") return std::pow(a, b);
    return fail();
  }

  nlohmann::json parse_sum() {
    nlohmann::json value = parse_product();
    for (;;) {
      if (failed_) return nullptr;
      if (accept("+")) {
        value = arithmetic(value, parse_product(), "+");
      } else if (accept("-")) {
        value = arithmetic(value, parse_product(), "-");
      } else {
        return value;
      }
    }
  }

  nlohmann::json parse_product() {
    nlohmann::json value = parse_unary();
    for (;;) {
      if (failed_) return nullptr;
      skip_space();
      if (text_.substr(at_, 2) == "**") return value;  // handled in parse_power
      if (accept("//")) {
        value = arithmetic(value, parse_unary(), "//");
      } else if (accept("*")) {
        value = arithmetic(value, parse_unary(), "*");
      } else if (accept("/")) {
        value = arithmetic(value, parse_unary(), "/");
      } else if (accept("%")) {
        value = arithmetic(value, parse_unary(), "%");
      } else {
        return value;
      }
    }
  }

  nlohmann::json parse_unary() {
    if (accept("-")) {
      nlohmann::json operand = parse_unary();
      if (failed_) return nullptr;
      if (operand.is_number_integer()) return -operand.get<long long>();
      if (operand.is_number()) return -operand.get<double>();
      return fail();
    }
    if (accept("+")) return parse_unary();
    return parse_power();
  }

  nlohmann::json parse_power() {
    nlohmann::json base = parse_atom();
    if (failed_) return nullptr;
    if (accept("**")) return arithmetic(base, parse_unary(), "**");
    return base;
  }

  nlohmann::json parse_sequence(char close) {
    nlohmann::json items = nlohmann::json::array();
    bool trailing_comma = false;
    for (;;) {
      skip_space();
      if (at_ < text_.size() && text_[at_] == close) {
        ++at_;
        break;
      }
      items.push_back(parse_sum());
      if (failed_) return nullptr;
      trailing_comma = accept(",");
      if (!trailing_comma) {
        if (!accept(std::string_view(&close, 1))) return fail();
        break;
      }
    }
    if (close == ')' && items.size() == 1 && !trailing_comma) return items[0];  // parentheses, not a tuple
    return items;
  }

  nlohmann::json parse_number() {
    const std::size_t start = at_;
    while (at_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[at_])) != 0 || text_[at_] == '.' || text_[at_] == '_' ||
            ((text_[at_] == '+' || text_[at_] == '-') && at_ > start &&
             (text_[at_ - 1] == 'e' || text_[at_ - 1] == 'E') && !(text_.substr(start, 2) == "0x"))))
      ++at_;
    std::string digits;
    for (const char c : text_.substr(start, at_ - start))
      if (c != '_') digits += c;
    try {
      std::size_t used = 0;
      if (digits.find_first_of(".eE") == std::string::npos || digits.rfind("0x", 0) == 0) {
        const long long value = std::stoll(digits, &used, 0);
        if (used == digits.size()) return value;
      } else {
        const double value = std::stod(digits, &used);
        if (used == digits.size()) return value;
      }
    } catch (const std::exception&) {
    }
    return fail();
  }

  nlohmann::json parse_atom() {
    skip_space();
    if (at_ >= text_.size()) return fail();
    const char c = text_[at_];
    if (c == '(') {
      ++at_;
      return parse_sequence(')');
    }
    if (c == '[') {
      ++at_;
      return parse_sequence(']');
    }
    if (c == '"' || c == '\'') {
      const std::size_t length = string_literal_length(text_, at_);
      if (length == std::string_view::npos) return fail();
      const bool triple = length >= 6 && text_.substr(at_, 3) == std::string(3, c);
      const std::size_t open = triple ? 3 : 1;
      std::string value(text_.substr(at_ + open, length - 2 * open));
      at_ += length;
      if (value.find('\\') != std::string::npos) return fail();  // escapes: not worth decoding here
      return value;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) != 0 ||
        (c == '.' && at_ + 1 < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_ + 1])) != 0))
      return parse_number();
    if (is_identifier_start(c)) {
      const std::size_t start = at_;
      while (at_ < text_.size() && is_identifier_char(text_[at_])) ++at_;
      const std::string name(text_.substr(start, at_ - start));
      skip_space();
      if (at_ < text_.size() && (text_[at_] == '(' || text_[at_] == '.' || text_[at_] == '[')) return fail();
      if (name == "True") return true;
      if (name == "False") return false;
      if (name == "None") return nullptr;
      if (const auto found = known_.find(name); found != known_.end()) return *found;
      return fail();
    }
    return fail();
  }

  const nlohmann::json& known_;
  std::string_view text_;
  std::size_t at_ = 0;
  bool failed_ = false;
};

}  // namespace cuda_agent::detail::python
