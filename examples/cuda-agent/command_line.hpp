// SPDX-License-Identifier: Apache-2.0
#pragma once

// What every subcommand's argument parsing shares.

#include <stdexcept>  // runtime_error
#include <string>     // string, stoll, to_string

namespace cuda_agent::cli {

/// A command line the user has to correct; the message says how.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `text` as a whole number from `low` to `high`, else a UsageError naming `option`.
inline int parse_whole_number(const std::string& option, const std::string& text, long long low, long long high) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < low || value > high)
    throw UsageError(option + " expects a whole number from " + std::to_string(low) + " to " + std::to_string(high) +
                     ", not '" + text + "'");
  return static_cast<int>(value);
}

}  // namespace cuda_agent::cli
