// SPDX-License-Identifier: Apache-2.0
#pragma once

// Turns what g++, nvcc (its EDG front end, ptxas and the driver itself) and the linker
// print into located diagnostics. EDG's indented continuation lines ("argument types
// are: ...") are appended to the message, because the useful part of its messages often
// sits there; echoed source and caret lines are not. The raw log keeps everything.

#include <algorithm>    // all_of, any_of
#include <cctype>       // isdigit
#include <cstddef>      // size_t
#include <optional>     // optional
#include <string>       // string, stoi
#include <string_view>  // string_view
#include <vector>       // vector

#include "cuda_agent/evaluation.hpp"

namespace cuda_agent::detail {

namespace diagnostics {

inline std::optional<DiagnosticSeverity> severity_of(std::string_view word) {
  if (word == "error" || word == "fatal error" || word == "catastrophic error") return DiagnosticSeverity::error;
  if (word == "warning") return DiagnosticSeverity::warning;
  if (word == "note" || word == "remark") return DiagnosticSeverity::note;
  return std::nullopt;
}

inline bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

inline std::string trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return std::string(text.substr(first, text.find_last_not_of(" \t\r") - first + 1));
}

/// "file:line:column: severity: message" and "file:line: severity: message" (GCC).
inline std::optional<Diagnostic> parse_gcc(std::string_view line) {
  for (std::string_view word : {": fatal error: ", ": error: ", ": warning: ", ": note: "}) {
    const auto at = line.find(word);
    if (at == std::string_view::npos) continue;
    std::string_view location = line.substr(0, at);
    Diagnostic diagnostic;
    diagnostic.severity = *severity_of(word.substr(2, word.size() - 4));
    diagnostic.message = trimmed(line.substr(at + word.size()));
    // location: file:line:column or file:line (file may itself contain ':').
    const auto last = location.rfind(':');
    if (last == std::string_view::npos) return std::nullopt;
    if (!all_digits(location.substr(last + 1))) return std::nullopt;
    const auto before = location.rfind(':', last - 1);
    if (before != std::string_view::npos && all_digits(location.substr(before + 1, last - before - 1))) {
      diagnostic.line = std::stoi(std::string(location.substr(before + 1, last - before - 1)));
      diagnostic.column = std::stoi(std::string(location.substr(last + 1)));
      diagnostic.file = std::string(location.substr(0, before));
    } else {
      diagnostic.line = std::stoi(std::string(location.substr(last + 1)));
      diagnostic.file = std::string(location.substr(0, last));
    }
    if (diagnostic.file.empty()) return std::nullopt;
    return diagnostic;
  }
  return std::nullopt;
}

/// "file(line): severity #123-D: message" and "file(line): severity: message" (EDG, as
/// nvcc prints it).
inline std::optional<Diagnostic> parse_edg(std::string_view line) {
  const auto close = line.find("): ");
  if (close == std::string_view::npos) return std::nullopt;
  const auto open = line.rfind('(', close);
  if (open == std::string_view::npos || open == 0) return std::nullopt;
  const std::string_view number = line.substr(open + 1, close - open - 1);
  if (!all_digits(number)) return std::nullopt;
  std::string_view rest = line.substr(close + 3);
  const auto colon = rest.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view word = rest.substr(0, colon);
  if (const auto hash = word.find(" #"); hash != std::string_view::npos) word = word.substr(0, hash);
  const auto severity = severity_of(word);
  if (!severity) return std::nullopt;
  Diagnostic diagnostic;
  diagnostic.file = std::string(line.substr(0, open));
  diagnostic.line = std::stoi(std::string(number));
  diagnostic.severity = *severity;
  diagnostic.message = trimmed(rest.substr(colon + 1));
  return diagnostic;
}

/// "ptxas error   : ...", "nvcc fatal   : ...", "ptxas warning : ...", about `unit`.
inline std::optional<Diagnostic> parse_tool_line(std::string_view line, std::string_view unit) {
  for (std::string_view tool : {"ptxas", "nvcc", "nvlink", "fatbinary", "cicc"}) {
    if (line.substr(0, tool.size()) != tool) continue;
    std::string_view rest = line.substr(tool.size());
    const auto colon = rest.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string word = trimmed(rest.substr(0, colon));
    std::optional<DiagnosticSeverity> severity = word == "fatal" ? DiagnosticSeverity::error : severity_of(word);
    if (!severity) return std::nullopt;  // "ptxas info" lines are statistics, not diagnostics
    Diagnostic diagnostic;
    diagnostic.file = std::string(unit);
    diagnostic.severity = *severity;
    diagnostic.message = std::string(tool) + ": " + trimmed(rest.substr(colon + 1));
    return diagnostic;
  }
  return std::nullopt;
}

/// Linker complaints: undefined references, multiple definitions, missing libraries.
inline std::optional<Diagnostic> parse_linker(std::string_view line) {
  for (std::string_view phrase :
       {"undefined reference to", "multiple definition of", "cannot find -l", "undefined symbol"}) {
    const auto at = line.find(phrase);
    if (at == std::string_view::npos) continue;
    Diagnostic diagnostic;
    diagnostic.severity = DiagnosticSeverity::error;
    diagnostic.message = "link: " + trimmed(line.substr(at));
    // "file.cpp:(.text+0x1a): undefined reference to ..." carries the source file.
    const auto section = line.find(":(.");
    if (section != std::string_view::npos && section < at) {
      std::string_view file = line.substr(0, section);
      if (const auto space = file.rfind(' '); space != std::string_view::npos) file = file.substr(space + 1);
      diagnostic.file = std::string(file);
    }
    return diagnostic;
  }
  return std::nullopt;
}

}  // namespace diagnostics

/// Located diagnostics in compiler output. `source_root` (absolute, with a trailing '/')
/// is stripped from file names so that they read relative to the candidate; `unit` (the
/// translation unit being compiled) is used for tool messages that name no file.
[[nodiscard]] inline std::vector<Diagnostic> parse_compiler_diagnostics(std::string_view output,
                                                                        std::string_view source_root = {},
                                                                        std::string_view unit = {}) {
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < output.size();) {
    std::size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    lines.push_back(output.substr(start, end - start));
    start = end + 1;
  }
  auto is_caret = [](std::string_view line) {
    const auto mark = line.find_first_not_of(' ');
    return mark != std::string_view::npos && line[mark] == '^' &&
           line.find_first_not_of(" ^~") == std::string_view::npos;
  };

  std::vector<Diagnostic> found;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::optional<Diagnostic> diagnostic = diagnostics::parse_edg(lines[i]);
    const bool from_edg = diagnostic.has_value();
    if (!diagnostic) diagnostic = diagnostics::parse_gcc(lines[i]);
    if (!diagnostic) diagnostic = diagnostics::parse_tool_line(lines[i], unit);
    if (!diagnostic) diagnostic = diagnostics::parse_linker(lines[i]);
    if (!diagnostic) continue;
    if (from_edg) {
      // EDG follows a message with indented lines: more of the message ("argument types
      // are: ..."), the offending source line with a caret line under it, and
      // instantiation context. Keep the first kind only.
      std::size_t added = 0;
      for (; i + 1 < lines.size() && !lines[i + 1].empty() && lines[i + 1][0] == ' '; ++i) {
        const std::string_view next = lines[i + 1];
        const bool echoed_source = i + 2 < lines.size() && is_caret(lines[i + 2]);
        const std::string more = diagnostics::trimmed(next);
        if (echoed_source || is_caret(next) || more.rfind("detected during", 0) == 0 || more.empty() || added == 4)
          continue;
        diagnostic->message += "\n  " + more;
        ++added;
      }
    }
    if (!source_root.empty() && diagnostic->file.substr(0, source_root.size()) == source_root)
      diagnostic->file.erase(0, source_root.size());
    if (diagnostic->file.substr(0, 2) == "./") diagnostic->file.erase(0, 2);
    const bool duplicate = std::any_of(found.begin(), found.end(), [&](const Diagnostic& seen) {
      return seen.file == diagnostic->file && seen.line == diagnostic->line && seen.column == diagnostic->column &&
             seen.severity == diagnostic->severity && seen.message == diagnostic->message;
    });
    if (!duplicate) found.push_back(std::move(*diagnostic));
  }
  return found;
}

}  // namespace cuda_agent::detail
