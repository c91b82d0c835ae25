// SPDX-License-Identifier: Apache-2.0
#pragma once

// The small things every step of a build needs: its clock and how it words durations,
// running the trusted helpers (the Python probe, compiler identities, nvidia-smi, the
// precompiled header) outside the sandbox, stamps that tell when a tool was replaced, and
// handing the folders the sandbox writes to the sandbox user.

#include <chrono>        // steady_clock, duration, milliseconds
#include <cstddef>       // size_t
#include <filesystem>    // path, canonical, file_size, last_write_time
#include <functional>    // function
#include <optional>      // optional, nullopt
#include <string>        // string, to_string
#include <string_view>   // string_view
#include <system_error>  // error_code, system_error
#include <utility>       // move
#include <vector>        // vector

#include "cuda_agent/compile/compile_options.hpp"
#include "cuda_agent/detail/ownership.hpp"
#include "cuda_agent/process.hpp"

namespace cuda_agent::detail::compile {

/// Where the driver's progress lines go; the driver serialises the calls.
using ReportProgress = std::function<void(const std::string& line)>;

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// "3 s", "2.5 s", "0.25 s".
inline std::string format_seconds(double seconds) {
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  if (const auto dot = text.find('.'); dot != std::string::npos && text.size() > dot + 3) text.resize(dot + 3);
  return text + " s";
}

inline std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string joined;
  for (std::size_t i = 0; i < parts.size(); ++i) joined += (i ? std::string(separator) : "") + parts[i];
  return joined;
}

/// Runs a trusted helper (python probe, compiler identity, nvidia-smi) directly.
inline ProcessResult run_trusted(std::vector<std::string> argv, std::chrono::milliseconds timeout,
                                 std::optional<std::string> stdin_data = std::nullopt) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.environment = Environment::inherit_all();
  spec.environment.set("LC_ALL", "C");
  spec.timeout = timeout;
  spec.stdin_data = std::move(stdin_data);
  spec.output_limit = 256 * 1024;
  return run_process(spec);
}

inline std::filesystem::path resolve_program(const std::string& name, std::string_view what) {
  const auto found = find_program(name, Environment::inherit_all());
  if (!found) throw CompileDriverError("cannot find " + std::string(what) + " '" + name + "' on PATH");
  std::error_code error;
  const auto canonical = std::filesystem::canonical(*found, error);
  return error ? *found : canonical;
}

/// A stamp of a file that changes whenever the file is replaced or rewritten.
inline std::string file_stamp(const std::filesystem::path& path) {
  std::error_code error;
  const auto canonical = std::filesystem::canonical(path, error);
  if (error) return "missing:" + path.string();
  const auto size = std::filesystem::file_size(canonical, error);
  const auto time = std::filesystem::last_write_time(canonical, error);
  return canonical.string() + ":" + std::to_string(size) + ":" + std::to_string(time.time_since_epoch().count());
}

inline bool is_under(const std::filesystem::path& path, const std::filesystem::path& directory) {
  if (directory.empty()) return false;
  const std::string a = path.generic_string();
  std::string b = directory.generic_string();
  if (!b.empty() && b.back() != '/') b += '/';
  return a.rfind(b, 0) == 0;
}

inline void hand_over(const std::filesystem::path& path, const std::optional<UserIdentity>& user) {
  if (!user || !running_as_root()) return;
  try {
    give_path_to(path, *user);
  } catch (const std::system_error& error) {
    throw CompileDriverError("cannot hand " + path.string() + " to uid " + std::to_string(user->uid) + ": " +
                             error.code().message());
  }
}

}  // namespace cuda_agent::detail::compile
