// SPDX-License-Identifier: Apache-2.0
#pragma once

// The translation units of a build and what ties them together: the includes a unit
// names (through the candidate's own headers), which decide the precompiled header it
// gets; the prerequisites its depfile lists, which decide its cache key; and how its
// compile came out, which decides the link.

#include <algorithm>    // any_of
#include <cstddef>      // size_t
#include <filesystem>   // path
#include <map>          // map
#include <set>          // set
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move, pair
#include <vector>       // vector

#include "cuda_agent/evaluation.hpp"

namespace cuda_agent::detail::compile {

/// Local `#include "..."` and `#include <...>` targets of a source text.
inline std::vector<std::pair<std::string, bool>> includes_of(std::string_view text) {
  std::vector<std::pair<std::string, bool>> found;  // (target, quoted)
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const auto hash = line.find_first_not_of(" \t");
    if (hash == std::string_view::npos || line[hash] != '#') continue;
    line.remove_prefix(hash + 1);
    const auto word = line.find_first_not_of(" \t");
    if (word == std::string_view::npos || line.substr(word, 7) != "include") continue;
    line.remove_prefix(word + 7);
    const auto open = line.find_first_of("<\"");
    if (open == std::string_view::npos) continue;
    const char close = line[open] == '<' ? '>' : '"';
    const auto finish = line.find(close, open + 1);
    if (finish == std::string_view::npos) continue;
    found.emplace_back(std::string(line.substr(open + 1, finish - open - 1)), close == '"');
  }
  return found;
}

inline bool is_torch_include(std::string_view target) {
  for (std::string_view prefix : {"torch/", "ATen/", "c10/", "pybind11/", "caffe2/"})
    if (target.substr(0, prefix.size()) == prefix) return true;
  return false;
}

/// The torch and pybind11 headers `unit` includes, directly or through the candidate's
/// own headers.
inline std::set<std::string> torch_includes(const std::string& unit, const std::map<std::string, std::string>& files) {
  std::set<std::string> found;
  std::set<std::string> seen;
  std::vector<std::string> pending{unit};
  while (!pending.empty()) {
    const std::string current = pending.back();
    pending.pop_back();
    if (!seen.insert(current).second) continue;
    const auto file = files.find(current);
    if (file == files.end()) continue;
    const std::filesystem::path directory = std::filesystem::path(current).parent_path();
    for (const auto& [target, quoted] : includes_of(file->second)) {
      if (is_torch_include(target))
        found.insert(target);
      else if (quoted)
        pending.push_back((directory / target).lexically_normal().generic_string());
    }
  }
  return found;
}

/// Whether any of `includes` is, or starts with, one of `prefixes`.
inline bool includes_any_of(const std::set<std::string>& includes, const std::vector<std::string>& prefixes) {
  return std::any_of(includes.begin(), includes.end(), [&](const std::string& include) {
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& prefix) { return include.compare(0, prefix.size(), prefix) == 0; });
  });
}

/// The prerequisites listed in a make-style depfile.
inline std::vector<std::string> parse_depfile(std::string_view text) {
  std::vector<std::string> prerequisites;
  const auto colon = text.find(": ");
  if (colon == std::string_view::npos) return prerequisites;
  std::string current;
  for (std::size_t i = colon + 2; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      const char next = text[i + 1];
      if (next == '\n' || next == '\r') {
        ++i;
        if (next == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
        continue;
      }
      if (next == ' ' || next == '#' || next == '\\') {
        current += next;
        ++i;
        continue;
      }
    }
    if (c == '$' && i + 1 < text.size() && text[i + 1] == '$') {
      current += '$';
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!current.empty()) prerequisites.push_back(std::move(current));
      current.clear();
      // A blank line ends the rule; phony targets for headers (-MP) follow.
      if (c == '\n' && i + 1 < text.size() && text[i + 1] == '\n') break;
      continue;
    }
    current += c;
  }
  if (!current.empty()) prerequisites.push_back(std::move(current));
  return prerequisites;
}

/// One translation unit's outcome.
struct UnitOutcome {
  std::string file;
  bool succeeded = false;
  bool reused = false;
  bool timed_out = false;
  bool cacheable = true;
  std::string uncacheable_reason;
  std::string output;
  std::vector<Diagnostic> diagnostics;
  double seconds = 0;
  std::filesystem::path object;
  /// What the object is: its cache key, or for an object that cannot be cached, the
  /// SHA-256 of its bytes. The link is keyed on these.
  std::string key;
};

}  // namespace cuda_agent::detail::compile
