// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Text handling shared by the tools: everything a model reads must be valid UTF-8 (it
/// travels in JSON), free of terminal control sequences, bounded in size with the cut
/// stated, and numbered the way `cat -n` numbers lines.

#include <algorithm>    // min
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <cstdio>       // snprintf
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <vector>       // vector

namespace cuda_agent::detail {

/// The length of the well-formed UTF-8 sequence starting at `text[index]`, or 0 if the
/// bytes there do not form one (overlong forms, surrogates and values past U+10FFFF
/// are not well formed).
[[nodiscard]] inline std::size_t utf8_sequence_length(std::string_view text, std::size_t index) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(index);
  if (lead < 0x80) return 1;
  std::size_t length;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF)
    length = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (index + length > text.size()) return 0;
  if (byte(index + 1) < low || byte(index + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i)
    if (byte(index + i) < 0x80 || byte(index + i) > 0xBF) return 0;
  return length;
}

/// Appends `text` to `out` with every byte that is not part of well-formed UTF-8, and
/// every NUL, replaced by U+FFFD. JSON serialization of tool output would otherwise fail
/// on arbitrary bytes.
inline void append_sanitized_utf8(std::string& out, std::string_view text) {
  std::size_t clean_until = 0;  // text[copied, clean_until) is known to be fine
  std::size_t copied = 0;
  while (clean_until < text.size()) {
    const auto byte = static_cast<unsigned char>(text[clean_until]);
    if (byte >= 0x01 && byte < 0x80) {  // the common case: plain ASCII
      ++clean_until;
      continue;
    }
    const std::size_t length = byte == 0 ? 0 : utf8_sequence_length(text, clean_until);
    if (length != 0) {
      clean_until += length;
      continue;
    }
    out.append(text.substr(copied, clean_until - copied));
    out += "\xEF\xBF\xBD";
    copied = ++clean_until;
  }
  out.append(text.substr(copied));
}

/// `text` with invalid UTF-8 and NUL bytes replaced by U+FFFD (see append_sanitized_utf8).
[[nodiscard]] inline std::string sanitize_utf8(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  append_sanitized_utf8(clean, text);
  return clean;
}

/// The largest index not above `index` that does not fall inside a UTF-8 sequence.
[[nodiscard]] inline std::size_t utf8_boundary_at_or_before(std::string_view text, std::size_t index) noexcept {
  if (index >= text.size()) return text.size();
  std::size_t back = 0;
  while (index > 0 && back < 3 && (static_cast<unsigned char>(text[index]) & 0xC0) == 0x80) {
    --index;
    ++back;
  }
  return index;
}

/// Removes what a terminal would interpret rather than show: ANSI escape sequences
/// (colours, cursor moves, titles) and text overwritten through a carriage return, as
/// progress bars do. A line ending "\r\n" is kept as it is.
[[nodiscard]] inline std::string strip_terminal_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t line_start = 0;  // in `out`
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\x1b' && i + 1 < text.size()) {
      const char kind = text[i + 1];
      if (kind == '[') {  // CSI: parameters and intermediates, then one final byte in @..~
        std::size_t j = i + 2;
        while (j < text.size() && !(text[j] >= '@' && text[j] <= '~')) ++j;
        i = j;
        continue;
      }
      if (kind == ']') {  // OSC: up to BEL or ESC backslash
        std::size_t j = i + 2;
        while (j < text.size() && text[j] != '\a' && !(text[j] == '\x1b' && j + 1 < text.size() && text[j + 1] == '\\'))
          ++j;
        i = (j < text.size() && text[j] == '\x1b') ? j + 1 : j;
        continue;
      }
      ++i;  // a two-byte escape
      continue;
    }
    if (c == '\r') {
      if (i + 1 < text.size() && text[i + 1] == '\n') {
        out += c;
        continue;
      }
      if (i + 1 == text.size()) continue;
      out.resize(line_start);
      continue;
    }
    out += c;
    if (c == '\n') line_start = out.size();
  }
  return out;
}

/// "1.2 MB", "256 KB", "17 bytes".
[[nodiscard]] inline std::string format_size(std::uint64_t bytes) {
  char buffer[32];
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  if (bytes < 1024 * 1024) {
    std::snprintf(buffer, sizeof buffer, "%.1f KB", static_cast<double>(bytes) / 1024.0);
  } else if (bytes < std::uint64_t{1024} * 1024 * 1024) {
    std::snprintf(buffer, sizeof buffer, "%.1f MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  } else {
    std::snprintf(buffer, sizeof buffer, "%.1f GB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  return buffer;
}

/// Text cut to a size limit by removing its middle.
struct MidTruncated {
  std::string text;
  /// Bytes of the original that are not in `text`.
  std::uint64_t omitted_bytes = 0;
};

/// Keeps the first and last halves of `limit` bytes of the text `head + [gap] + tail`,
/// where `gap` counts bytes already dropped between `head` and `tail` (by a capture that
/// kept only both ends). Cuts move to line boundaries when one is near, and never split
/// a UTF-8 sequence. The notice says how much was left out and what to do about it.
[[nodiscard]] inline MidTruncated mid_truncate(std::string_view head, std::uint64_t gap, std::string_view tail,
                                               std::size_t limit, std::string_view advice) {
  const std::uint64_t total = head.size() + gap + tail.size();
  if (total <= limit) {
    std::string joined(head);
    joined += tail;
    return {std::move(joined), 0};
  }
  std::string whole;
  if (gap == 0) {  // one stream: cut it as one
    whole.assign(head);
    whole += tail;
    head = whole;
    tail = whole;
  }
  const std::size_t keep_front = limit / 2;
  const std::size_t keep_back = limit - keep_front;
  std::size_t front_end = utf8_boundary_at_or_before(head, std::min(keep_front, head.size()));
  if (const std::size_t newline = head.rfind('\n', front_end == 0 ? 0 : front_end - 1);
      newline != std::string_view::npos && front_end - newline < 200 && newline > 0)
    front_end = newline + 1;
  std::size_t back_start = tail.size() - std::min(keep_back, tail.size());
  back_start = utf8_boundary_at_or_before(tail, back_start);
  while (back_start < tail.size() && (static_cast<unsigned char>(tail[back_start]) & 0xC0) == 0x80) ++back_start;
  if (const std::size_t newline = tail.find('\n', back_start);
      newline != std::string_view::npos && newline - back_start < 200 && newline + 1 < tail.size())
    back_start = newline + 1;

  const std::uint64_t kept = front_end + (tail.size() - back_start);
  MidTruncated result;
  result.omitted_bytes = total - kept;
  result.text.assign(head.substr(0, front_end));
  if (!result.text.empty() && result.text.back() != '\n') result.text += '\n';
  result.text += "\n[... " + std::to_string(result.omitted_bytes) + " bytes omitted from the middle of " +
                 format_size(total) + " of output";
  if (!advice.empty()) result.text += "; " + std::string(advice);
  result.text += " ...]\n\n";
  result.text.append(tail.substr(back_start));
  return result;
}

/// Appends one line as `cat -n` prints it: the number right-aligned in six columns, a tab,
/// the text (repaired to valid UTF-8).
inline void append_numbered_line(std::string& out, std::size_t number, std::string_view line) {
  char prefix[32];
  const int length = std::snprintf(prefix, sizeof prefix, "%6zu\t", number);
  out.append(prefix, static_cast<std::size_t>(length));
  append_sanitized_utf8(out, line);
  out += '\n';
}

/// 1-based number of the line that holds byte `offset` of `text`.
[[nodiscard]] inline std::size_t line_number_at(std::string_view text, std::size_t offset) noexcept {
  std::size_t line = 1;
  const std::size_t end = std::min(offset, text.size());
  for (std::size_t i = 0; i < end; ++i)
    if (text[i] == '\n') ++line;
  return line;
}

/// Lines in `text`; a final line without a newline counts, an empty text has none.
[[nodiscard]] inline std::size_t count_lines(std::string_view text) noexcept {
  if (text.empty()) return 0;
  std::size_t lines = 0;
  for (const char c : text)
    if (c == '\n') ++lines;
  return text.back() == '\n' ? lines : lines + 1;
}

/// "3, 17 and 42" for line numbers (at most `limit` listed).
[[nodiscard]] inline std::string list_line_numbers(const std::vector<std::size_t>& lines, std::size_t limit = 20) {
  std::string text;
  for (std::size_t i = 0; i < lines.size() && i < limit; ++i) {
    if (i != 0) text += (i + 1 == lines.size() && lines.size() <= limit) ? " and " : ", ";
    text += std::to_string(lines[i]);
  }
  if (lines.size() > limit) text += " and " + std::to_string(lines.size() - limit) + " more";
  return text;
}

/// Lines `first`..`last` (1-based, inclusive, clamped) of `text` in `cat -n` form.
[[nodiscard]] inline std::string numbered_excerpt(std::string_view text, std::size_t first, std::size_t last) {
  std::string out;
  std::size_t number = 1;
  std::size_t start = 0;
  while (start <= text.size() && number <= last) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (number >= first) append_numbered_line(out, number, text.substr(start, end - start));
    if (end == text.size()) break;
    start = end + 1;
    ++number;
    if (start == text.size()) break;  // a final newline does not start another line
  }
  return out;
}

/// A one-line preview of `text` for a message: at most about `limit` bytes, newlines
/// written as \\n, "..." where it was cut.
[[nodiscard]] inline std::string one_line_preview(std::string_view text, std::size_t limit) {
  std::string out;
  std::size_t consumed = 0;
  for (; consumed < text.size() && out.size() < limit; ++consumed) {
    if (text[consumed] == '\n')
      out += "\\n";
    else
      out += text[consumed];
  }
  if (consumed < text.size()) {
    out.resize(utf8_boundary_at_or_before(out, std::min(out.size(), limit)));
    out += "...";
  }
  return sanitize_utf8(out);
}

}  // namespace cuda_agent::detail
