// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>  // size_t
#include <cstdio>   // snprintf
#include <string>   // string

namespace cuda_agent::detail {

/// `pattern`, printf's, filled with `arguments`: numbers in reports, summaries and the
/// text the model reads. Of any length (measured first, then written).
template <class... Arguments>
[[nodiscard]] std::string format(const char* pattern, Arguments... arguments) {
  const int length = std::snprintf(nullptr, 0, pattern, arguments...);
  if (length <= 0) return {};
  std::string text(static_cast<std::size_t>(length), '\0');
  // The terminating null goes where std::string keeps its own.
  std::snprintf(text.data(), text.size() + 1, pattern, arguments...);
  return text;
}

}  // namespace cuda_agent::detail
