// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>  // string
#include <vector>  // vector

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

}  // namespace cuda_agent::detail
