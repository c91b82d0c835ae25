// SPDX-License-Identifier: Apache-2.0
#pragma once

// One include for Catch2 v2 (single header, Debian 12) and Catch2 v3 (split headers).
#if __has_include(<catch2/catch_test_macros.hpp>)
#include <string>  // string

#include <catch2/catch_approx.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#define CUDA_AGENT_CATCH_VERSION 3
// v2 offers Approx at global scope; v3 only as Catch::Approx.
using Catch::Approx;
// v3 renamed the substring matcher; the v2 name keeps working for tests that use it.
namespace Catch::Matchers {
inline StringContainsMatcher Contains(std::string const& text, CaseSensitive sensitivity = CaseSensitive::Yes) {
  return ContainsSubstring(text, sensitivity);
}
}  // namespace Catch::Matchers
#else
#include <catch2/catch.hpp>
#define CUDA_AGENT_CATCH_VERSION 2
#endif

#include <cstdlib>   // getenv
#include <iostream>  // cout
#include <string>    // string

namespace cuda_agent::testing {

/// Marks a test as skipped with a reason. ctest recognises the line through the test's
/// SKIP_REGULAR_EXPRESSION, so a missing GPU shows up as "skipped", not as a pass.
inline void skip(const std::string& reason) { std::cout << "[cuda-agent-test-skipped] " << reason << std::endl; }

}  // namespace cuda_agent::testing

/// Leaves the current test, reporting it as skipped.
#define CUDA_AGENT_SKIP(reason)          \
  do {                                   \
    ::cuda_agent::testing::skip(reason); \
    return;                              \
  } while (false)
