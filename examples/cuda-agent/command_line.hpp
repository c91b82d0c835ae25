// SPDX-License-Identifier: Apache-2.0
#pragma once

// What every subcommand's argument parsing shares: CLI11 checks whose messages say what
// to write instead ("--runs: expects a whole number from 1 to 100, not '0'"), and the
// error a subcommand throws when the command line is wrong in a way CLI11 cannot see
// (a task file that does not exist, --resume without --out).

#include <CLI/CLI.hpp>

#include <cstddef>      // size_t
#include <cstdint>      // uint32_t
#include <cstdlib>      // getenv
#include <exception>    // exception
#include <filesystem>   // path, exists
#include <stdexcept>    // runtime_error
#include <string>       // string, stoll, stod, stoull, to_string
#include <type_traits>  // is_same_v
#include <utility>      // move
#include <vector>       // vector

namespace cuda_agent::cli {

/// A command line the user has to correct; the message says how.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace parsing {

/// Whether all of `text` reads as a `Number` (long long, unsigned long long or double); the
/// value in `value`.
template <typename Number>
bool reads_as(const std::string& text, Number& value) {
  std::size_t used = 0;
  try {
    if constexpr (std::is_same_v<Number, double>)
      value = std::stod(text, &used);
    else if constexpr (std::is_same_v<Number, unsigned long long>)
      value = std::stoull(text, &used);
    else
      value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size() && !text.empty();
}

/// A check that the text reads as a `Number` that `fits`; else "expects <what>, not '<text>'".
template <typename Number, typename Fits>
CLI::Validator number_check(Fits fits, std::string what, std::string name) {
  return CLI::Validator(
      [fits, what = std::move(what)](std::string& text) -> std::string {
        Number value{};
        if (reads_as(text, value) && fits(value)) return {};
        return "expects " + what + ", not '" + text + "'";
      },
      "", std::move(name));
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
  return parsing::number_check<long long>([low, high](long long value) { return value >= low && value <= high; },
                                          "a whole number from " + std::to_string(low) + " to " + std::to_string(high),
                                          "whole number");
}

/// A number above zero.
inline CLI::Validator positive_number() {
  return parsing::number_check<double>([](double value) { return value > 0; }, "a positive number", "positive number");
}

/// A fraction strictly between 0 and 1.
inline CLI::Validator fraction() {
  return parsing::number_check<double>([](double value) { return value > 0 && value < 1; },
                                       "a fraction between 0 and 1 (0.05 for 5%)", "fraction");
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

/// One seed, from 0 to 2^32 - 1.
inline std::uint32_t seed_from(const std::string& option, const std::string& text) {
  unsigned long long value = 0;
  if (!parsing::reads_as(text, value) || value > 0xffffffffULL || text.front() == '-')
    throw UsageError(option + " expects seeds from 0 to 4294967295, not '" + text + "'");
  return static_cast<std::uint32_t>(value);
}

/// The seeds of `--seeds A,B,...`.
inline std::vector<std::uint32_t> seeds_from(const std::string& option, const std::string& list) {
  std::vector<std::uint32_t> seeds;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = list.find(',', start);
    seeds.push_back(seed_from(option, list.substr(start, comma - start)));
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
