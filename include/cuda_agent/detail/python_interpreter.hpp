// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdlib>     // getenv
#include <filesystem>  // path
#include <optional>    // optional

#include "cuda_agent/process.hpp"

namespace cuda_agent::detail {

/// The Python interpreter to run the harness and the compile probe with: `configured`
/// where it names one, else `$CUDA_AGENT_PYTHON`, else python3.
[[nodiscard]] inline std::filesystem::path configured_python(const std::filesystem::path& configured) {
  if (!configured.empty()) return configured;
  if (const char* environment = std::getenv("CUDA_AGENT_PYTHON"); environment && *environment) return environment;
  return "python3";
}

/// `configured_python(configured)`, a bare name found in `PATH`; nullopt when it is not
/// there. A path (with a slash) is returned as it is.
[[nodiscard]] inline std::optional<std::filesystem::path> locate_python(const std::filesystem::path& configured) {
  const std::filesystem::path python = configured_python(configured);
  if (python.string().find('/') != std::string::npos) return python;
  return find_program(python.string(), Environment::from_current({"PATH"}));
}

}  // namespace cuda_agent::detail
