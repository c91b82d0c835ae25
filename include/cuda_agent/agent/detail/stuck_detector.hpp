// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>  // size_t
#include <string>   // string
#include <utility>  // move

#include "cuda_agent/message.hpp"

namespace cuda_agent::detail {

/// Notices a model that keeps repeating the same failing action: the same tool with the
/// same arguments failing again with no other call in between, so nothing the model did
/// could have changed the outcome. Outputs are not compared: they often differ in noise
/// (timestamps, temporary names) while the model is plainly going round in circles. A
/// repeated call with other work in between (edit, verify, edit, verify) is progress.
class StuckDetector {
 public:
  /// Records a finished call; returns how often this exact call has now failed in a row
  /// (0 if it succeeded).
  std::size_t record(const ToolCall& call, bool failed) {
    std::string key = call.name + '\n' + call.arguments.dump();
    failures_ = !failed ? 0 : (key == last_key_ ? failures_ + 1 : 1);
    last_key_ = std::move(key);
    return failures_;
  }

 private:
  std::string last_key_;
  std::size_t failures_ = 0;
};

}  // namespace cuda_agent::detail
