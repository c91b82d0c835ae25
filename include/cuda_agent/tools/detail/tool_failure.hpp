// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <stdexcept>  // runtime_error
#include <string>     // string

namespace cuda_agent::detail {

/// A problem the model caused and can fix (a path outside the workspace, a missing file,
/// an ambiguous edit). Thrown inside a tool's implementation and turned into an error
/// result at the tool's boundary; its text is what the model reads.
class ToolFailure : public std::runtime_error {
 public:
  explicit ToolFailure(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace cuda_agent::detail
