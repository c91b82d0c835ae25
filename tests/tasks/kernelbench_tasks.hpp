// SPDX-License-Identifier: Apache-2.0
#pragma once

// The KernelBench task files the tests of tasks/ load.

#include <filesystem>  // path

namespace cuda_agent::testing {

inline const std::filesystem::path kernelbench = std::filesystem::path(CUDA_AGENT_TEST_DATA_DIR) / "kernelbench";

}  // namespace cuda_agent::testing
