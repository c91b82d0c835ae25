// SPDX-License-Identifier: Apache-2.0
// Glob patterns (for Glob and Grep's glob filter) and ripgrep-style filter lists.
#include "catch.hpp"

#include <cuda_agent/tools/detail/glob_match.hpp>

#include <string>

namespace detail = cuda_agent::detail;

TEST_CASE("stars stay within a component, double stars cross them", "[tools][glob]") {
  const detail::GlobPattern star("*.cu");
  CHECK(star.matches("add.cu"));
  CHECK_FALSE(star.matches("kernels/add.cu"));
  CHECK_FALSE(star.matches("add.cuh"));
  const detail::GlobPattern deep("**/*.cu");
  CHECK(deep.matches("add.cu"));
  CHECK(deep.matches("kernels/add.cu"));
  CHECK(deep.matches("a/b/c/add.cu"));
  const detail::GlobPattern middle("src/**/test_*.py");
  CHECK(middle.matches("src/test_a.py"));
  CHECK(middle.matches("src/x/y/test_a.py"));
  CHECK_FALSE(middle.matches("lib/test_a.py"));
  const detail::GlobPattern tail("build/**");
  CHECK(tail.matches("build/a"));
  CHECK(tail.matches("build/a/b.o"));
  CHECK_FALSE(tail.matches("src/a"));
  CHECK(detail::GlobPattern("**").matches("any/thing"));
  CHECK(detail::GlobPattern("a**b").matches("axxb"));  // not a whole component: behaves as *
  CHECK_FALSE(detail::GlobPattern("a**b").matches("ax/xb"));
}

TEST_CASE("question marks, classes, braces and escapes", "[tools][glob]") {
  CHECK(detail::GlobPattern("file?.txt").matches("file1.txt"));
  CHECK_FALSE(detail::GlobPattern("file?.txt").matches("file12.txt"));
  CHECK(detail::GlobPattern("[ab]*.py").matches("b_test.py"));
  CHECK_FALSE(detail::GlobPattern("[ab]*.py").matches("c_test.py"));
  CHECK(detail::GlobPattern("[!ab]*.py").matches("c_test.py"));
  CHECK(detail::GlobPattern("v[0-9].txt").matches("v7.txt"));
  const detail::GlobPattern braces("*.{cu,cuh,cpp}");
  CHECK(braces.matches("a.cu"));
  CHECK(braces.matches("a.cuh"));
  CHECK(braces.matches("a.cpp"));
  CHECK_FALSE(braces.matches("a.py"));
  CHECK(detail::GlobPattern("{src,include}/**/*.h").matches("include/x/y.h"));
  CHECK(detail::GlobPattern("a{b,{c,d}}e").matches("ade"));
  CHECK(detail::GlobPattern("\\*.txt").matches("*.txt"));
  CHECK_FALSE(detail::GlobPattern("\\*.txt").matches("a.txt"));
  CHECK(detail::GlobPattern("[abc").matches("[abc"));  // unclosed: literal
  CHECK(detail::GlobPattern("{abc").matches("{abc"));
  CHECK_THROWS_AS(detail::GlobPattern("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"), detail::ToolFailure);
}

TEST_CASE("patterns without a slash match file names at any depth", "[tools][glob]") {
  const detail::GlobPattern name("*.cu");
  CHECK(name.matches_file("kernels/deep/add.cu"));
  const detail::GlobPattern anchored("kernels/*.cu");
  CHECK(anchored.matches_file("kernels/add.cu"));
  CHECK_FALSE(anchored.matches_file("other/kernels/add.cu"));
}

TEST_CASE("filter lists include, exclude and split on commas outside braces", "[tools][glob]") {
  const detail::GlobFilter filter("*.cu,*.cuh !*_test.cu");
  CHECK(filter.admits("kernels/add.cu"));
  CHECK(filter.admits("kernels/add.cuh"));
  CHECK_FALSE(filter.admits("kernels/add_test.cu"));
  CHECK_FALSE(filter.admits("model.py"));
  const detail::GlobFilter braces("*.{cu,py}");
  CHECK(braces.admits("a.py"));
  CHECK(braces.admits("b/a.cu"));
  const detail::GlobFilter only_exclude("!*.o");
  CHECK(only_exclude.admits("a.cu"));
  CHECK_FALSE(only_exclude.admits("build/a.o"));
  CHECK(detail::GlobFilter("").admits("anything"));
  CHECK(detail::GlobFilter("/kernels/*.cu").admits("kernels/a.cu"));
}
