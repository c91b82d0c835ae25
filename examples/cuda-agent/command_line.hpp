// SPDX-License-Identifier: Apache-2.0
#pragma once

// What every subcommand's argument parsing shares: CLI11 checks whose messages say what
// to write instead ("--runs: expects a whole number from 1 to 100, not '0'"), and the
// error a subcommand throws when the command line is wrong in a way CLI11 cannot see
// (a task file that does not exist, --resume without --out).

#include <CLI/CLI.hpp>

#include <cstddef>     // size_t
#include <cstdint>     // uint32_t
#include <cstdlib>     // getenv
#include <exception>   // exception
#include <filesystem>  // path, exists
#include <stdexcept>   // runtime_error
#include <string>      // string, stoll, stod, stoull, to_string
#include <utility>     // move
#include <vector>      // vector

namespace cuda_agent::cli {

/// A command line the user has to correct; the message says how.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace parsing {

/// Whether all of `text` reads as a number of type `Number` through `convert` (one of
/// std::stoll, std::stod, std::stoull); the value in `value`.
template <typename Number, typename Convert>
bool reads_as(const std::string& text, Convert convert, Number& value) {
  std::size_t used = 0;
  try {
    value = static_cast<Number>(convert(text, &used));
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size() && !text.empty();
}

inline std::string listed(const std::vector<std::string>& choices) {
  std::string text;
  for (std::size_t i = 0; i < choices.size(); ++i)
    text += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return text;
}

}  // namespace parsing

/// A whole number from `low` to `high`.
inline CLI::Validator whole_number(long long low, long long high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        long long value = 0;
        if (parsing::reads_as(
                text, [](const std::string& s, std::size_t* used) { return std::stoll(s, used); }, value) &&
            value >= low && value <= high)
          return {};
        return "expects a whole number from " + std::to_string(low) + " to " + std::to_string(high) + ", not '" + text +
               "'";
      },
      "", "whole number");
}

/// A number above zero.
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (parsing::reads_as(
                text, [](const std::string& s, std::size_t* used) { return std::stod(s, used); }, value) &&
            value > 0)
          return {};
        return "expects a positive number, not '" + text + "'";
      },
      "", "positive number");
}

/// A fraction strictly between 0 and 1.
inline CLI::Validator fraction() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (parsing::reads_as(
                text, [](const std::string& s, std::size_t* used) { return std::stod(s, used); }, value) &&
            value > 0 && value < 1)
          return {};
        return "expects a fraction between 0 and 1 (0.05 for 5%), not '" + text + "'";
      },
      "", "fraction");
}

/// One of `choices`, written out in the message and in the help ("auto, cuda or cpu").
inline CLI::Validator one_of(std::vector<std::string> choices) {
  const std::string description = parsing::listed(choices);
  return CLI::Validator(
      [choices = std::move(choices), description](std::string& text) -> std::string {
        for (const std::string& choice : choices)
          if (text == choice) return {};
        return "expects " + description + ", not '" + text + "'";
      },
      "", "choice");
}

/// The seeds of `--seeds A,B,...`: each from 0 to 2^32 - 1.
inline std::vector<std::uint32_t> seeds_from(const std::string& option, const std::string& list) {
  std::vector<std::uint32_t> seeds;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = list.find(',', start);
    const std::string text = list.substr(start, comma - start);
    unsigned long long value = 0;
    if (!parsing::reads_as(
            text, [](const std::string& s, std::size_t* used) { return std::stoull(s, used); }, value) ||
        value > 0xffffffffULL || text.front() == '-')
      throw UsageError(option + " expects seeds from 0 to 4294967295, not '" + text + "'");
    seeds.push_back(static_cast<std::uint32_t>(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return seeds;
}

/// The Python with torch: `--python`, else `$CUDA_AGENT_PYTHON`, else the interpreter this
/// program was configured with (CMake's CUDA_AGENT_PYTHON), else python3.
inline std::filesystem::path python_for_harness(const std::filesystem::path& given) {
  if (!given.empty()) return given;
  if (const char* environment = std::getenv("CUDA_AGENT_PYTHON"); environment && *environment) return environment;
#ifdef CUDA_AGENT_CLI_DEFAULT_PYTHON
  if (std::filesystem::exists(CUDA_AGENT_CLI_DEFAULT_PYTHON)) return CUDA_AGENT_CLI_DEFAULT_PYTHON;
#endif
  return "python3";
}

}  // namespace cuda_agent::cli
