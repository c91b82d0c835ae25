// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The samples of a benchmark run and the tasks they answer, found by KernelBench's names:
/// generations `level_{L}_problem_{P}_sample_{S}_kernel.py` (single files) or candidate
/// directories `level_{L}_problem_{P}_sample_{S}` (model_new.py and kernels/), and task files
/// `level{L}/{P}_{Name}.py` under a tasks folder, as KernelBench ships them.

#include <algorithm>     // sort
#include <charconv>      // from_chars
#include <filesystem>    // path, directory_iterator
#include <map>           // map
#include <optional>      // optional
#include <stdexcept>     // runtime_error
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <tuple>         // tie
#include <utility>       // pair
#include <vector>        // vector

namespace cuda_agent {

/// Where a sample sits in KernelBench: level, problem and sample number.
struct SampleKey {
  int level = 0;
  int problem = 0;
  int sample = 0;

  friend bool operator<(const SampleKey& a, const SampleKey& b) {
    return std::tie(a.level, a.problem, a.sample) < std::tie(b.level, b.problem, b.sample);
  }
  friend bool operator==(const SampleKey&, const SampleKey&) = default;
  /// "level_1_problem_19_sample_0": the name of its results.
  [[nodiscard]] std::string name() const {
    return "level_" + std::to_string(level) + "_problem_" + std::to_string(problem) + "_sample_" +
           std::to_string(sample);
  }
};

/// One sample to score: a generation file or a candidate directory.
struct GenerationSample {
  SampleKey key;
  std::filesystem::path path;
  bool is_directory = false;
};

/// The samples of a folder, and the entries that are not samples (left out, by name).
struct GenerationSet {
  std::vector<GenerationSample> samples;
  std::vector<std::string> ignored;
};

namespace detail {

/// Reads `<digits>` at the front of `text` into `value`, and drops them.
[[nodiscard]] inline bool take_number(std::string_view& text, int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() || value < 0) return false;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return true;
}

[[nodiscard]] inline bool take_prefix(std::string_view& text, std::string_view prefix) {
  if (text.substr(0, prefix.size()) != prefix) return false;
  text.remove_prefix(prefix.size());
  return true;
}

}  // namespace detail

/// The key of `level_{L}_problem_{P}_sample_{S}` followed by exactly `suffix`.
[[nodiscard]] inline std::optional<SampleKey> parse_sample_name(std::string_view name, std::string_view suffix) {
  SampleKey key;
  if (detail::take_prefix(name, "level_") && detail::take_number(name, key.level) &&
      detail::take_prefix(name, "_problem_") && detail::take_number(name, key.problem) &&
      detail::take_prefix(name, "_sample_") && detail::take_number(name, key.sample) && name == suffix)
    return key;
  return std::nullopt;
}

/// The samples directly in `folder`, in level, problem and sample order. Symbolic links are
/// left out (a generation is read without following links). Throws std::runtime_error when
/// the folder cannot be read, or when one sample appears both as a file and a directory.
[[nodiscard]] inline GenerationSet find_generations(const std::filesystem::path& folder) {
  std::error_code error;
  std::filesystem::directory_iterator entries(folder, error);
  if (error) throw std::runtime_error("cannot read the generations in " + folder.string() + ": " + error.message());
  GenerationSet set;
  std::map<SampleKey, std::filesystem::path> seen;
  for (const std::filesystem::directory_entry& entry : entries) {
    const std::string name = entry.path().filename().string();
    const bool directory = !entry.is_symlink(error) && entry.is_directory(error);
    const bool file = !entry.is_symlink(error) && entry.is_regular_file(error);
    std::optional<SampleKey> key = directory ? parse_sample_name(name, "")
                                   : file    ? parse_sample_name(name, "_kernel.py")
                                             : std::nullopt;
    if (!key) {
      set.ignored.push_back(name);
      continue;
    }
    if (const auto [at, inserted] = seen.emplace(*key, entry.path()); !inserted)
      throw std::runtime_error("sample " + key->name() + " is in " + folder.string() +
                               " twice: " + at->second.filename().string() + " and " + name);
    set.samples.push_back(GenerationSample{*key, entry.path(), directory});
  }
  std::sort(set.samples.begin(), set.samples.end(),
            [](const GenerationSample& a, const GenerationSample& b) { return a.key < b.key; });
  std::sort(set.ignored.begin(), set.ignored.end());
  return set;
}

/// KernelBench's task files under `folder`: `level{L}/{P}_{Name}.py`, by (level, problem).
[[nodiscard]] inline std::map<std::pair<int, int>, std::filesystem::path> index_kernelbench_tasks(
    const std::filesystem::path& folder) {
  std::map<std::pair<int, int>, std::filesystem::path> tasks;
  std::error_code error;
  for (const std::filesystem::directory_entry& level_folder : std::filesystem::directory_iterator(folder, error)) {
    const std::string level_folder_name = level_folder.path().filename().string();
    std::string_view level_name = level_folder_name;
    int level = 0;
    if (!level_folder.is_directory(error) || !detail::take_prefix(level_name, "level") ||
        !detail::take_number(level_name, level) || !level_name.empty())
      continue;
    for (const std::filesystem::directory_entry& file : std::filesystem::directory_iterator(level_folder, error)) {
      const std::string file_name = file.path().filename().string();
      std::string_view name = file_name;
      int problem = 0;
      if (file.path().extension() == ".py" && detail::take_number(name, problem) && detail::take_prefix(name, "_"))
        tasks.emplace(std::pair{level, problem}, file.path());
    }
  }
  if (error) throw std::runtime_error("cannot read the tasks in " + folder.string() + ": " + error.message());
  return tasks;
}

}  // namespace cuda_agent
