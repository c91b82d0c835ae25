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
  char small[128];
  const int length = std::snprintf(small, sizeof small, pattern, arguments...);
  if (length < 0) return {};
  if (static_cast<std::size_t>(length) < sizeof small) return std::string(small, static_cast<std::size_t>(length));
  std::string text(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(text.data(), text.size(), pattern, arguments...);
  text.resize(static_cast<std::size_t>(length));
  return text;
}

}  // namespace cuda_agent::detail
