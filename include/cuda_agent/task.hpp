// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A task: a PyTorch reference `Model` with `get_inputs` and `get_init_inputs`, which a
/// candidate `ModelNew` must reproduce faster.

#include <map>          // map
#include <string>       // string
#include <string_view>  // string_view

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/sha256.hpp"

namespace cuda_agent {

/// Where a task came from.
enum class TaskOrigin {
  kernelbench_file,  ///< a KernelBench problem file
  workspace,         ///< a CUDA-Agent style directory (model.py, model_new.py, kernels/)
  ops6k_row,         ///< one row of a CUDA-Agent-Ops-6K style JSONL file
  source,            ///< reference source given directly by the host
};

[[nodiscard]] constexpr std::string_view to_string(TaskOrigin origin) noexcept {
  switch (origin) {
    case TaskOrigin::kernelbench_file:
      return "kernelbench_file";
    case TaskOrigin::workspace:
      return "workspace";
    case TaskOrigin::ops6k_row:
      return "ops6k_row";
    case TaskOrigin::source:
      return "source";
  }
  return "source";
}

struct Task {
  /// Human-readable and filesystem-safe, e.g. "level1/19_ReLU".
  std::string name;
  /// The Python module that defines `Model`, `get_inputs` and `get_init_inputs`.
  std::string reference_source;
  TaskOrigin origin = TaskOrigin::source;
  /// Candidate files that come with the task (a workspace's `model_new.py` and
  /// `kernels/...`), by path relative to the workspace.
  std::map<std::string, std::string> candidate_files;
  /// Level, operator list, data source, ... as the origin provides them.
  nlohmann::json metadata = nlohmann::json::object();

  /// A stable identity of what the task computes: SHA-256 of the reference source, so
  /// that the same reference under another name shares cached baselines.
  [[nodiscard]] std::string content_hash() const {
    return detail::Sha256{}.update("cuda-agent task v1\n").update(reference_source).hex_digest();
  }
};

}  // namespace cuda_agent
