// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>      // size_t
#include <stdexcept>    // invalid_argument
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // exchange
#include <vector>       // vector

namespace cuda_agent::detail {

/// The POSIX shell line that replaces the shell with `command` (`exec`, so that a signal
/// sent to the job reaches the program itself), each argument quoted where it has to be.
/// For engines that take a job's command as one shell line (Ray's entrypoint, a Slurm batch
/// script).
[[nodiscard]] inline std::string exec_shell_line(const std::vector<std::string>& command) {
  // What a POSIX shell takes literally, without quotes.
  static constexpr const char* plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./:=,@+%";
  std::string line = "exec";
  for (const std::string& argument : command) {
    line += ' ';
    if (!argument.empty() && argument.find_first_not_of(plain) == std::string::npos) {
      line += argument;
      continue;
    }
    line += '\'';
    for (const char c : argument) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

/// The words of `text` as a POSIX shell splits a command line, with nothing expanded
/// (`$`, `*` and `~` stay as written): blanks separate words; single quotes keep what they
/// enclose; double quotes too, but for a backslash before `"`, `\`, `$` or a backtick, which
/// stands for that character; elsewhere a backslash keeps the character after it. For a
/// command's arguments given as one option. Throws std::invalid_argument for a quote left
/// open or a backslash at the end.
[[nodiscard]] inline std::vector<std::string> shell_words(std::string_view text) {
  const auto refuse = [&](const std::string& what) {
    return std::invalid_argument(what + " in the shell words '" + std::string(text) + "'");
  };
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has begun, perhaps an empty one ('')
  for (std::size_t at = 0; at < text.size(); ++at) {
    const char c = text[at];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (++at == text.size()) throw refuse("a backslash at the end");
      word += text[at];
    } else if (c == '\'') {
      const std::size_t close = text.find('\'', at + 1);
      if (close == std::string_view::npos) throw refuse("a single quote left open");
      word.append(text.substr(at + 1, close - at - 1));
      at = close;
    } else if (c == '"') {
      for (++at; at < text.size() && text[at] != '"'; ++at) {
        if (text[at] == '\\' && at + 1 < text.size() &&
            std::string_view("\"\\$`").find(text[at + 1]) != std::string_view::npos)
          ++at;
        word += text[at];
      }
      if (at == text.size()) throw refuse("a double quote left open");
    } else {
      word += c;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace cuda_agent::detail
