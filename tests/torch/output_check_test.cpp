// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

// c10 defines a glog-style CHECK(condition) that would silently replace Catch's assertion.
#pragma push_macro("CHECK")
#include <cuda_agent/torch/output_check.hpp>
#pragma pop_macro("CHECK")

#include <cmath>  // NAN, INFINITY, abs

namespace ca = cuda_agent;

namespace {
at::Tensor grid(std::int64_t rows, std::int64_t columns, at::ScalarType type = at::kFloat) {
  return at::arange(rows * columns, at::TensorOptions().dtype(at::kDouble)).reshape({rows, columns}).div(7.0).to(type);
}
}  // namespace

TEST_CASE("equal outputs pass with zero error", "[torch]") {
  const at::Tensor reference = grid(4, 5);
  const ca::OutputCheck check = ca::check_output(reference, reference.clone());
  CHECK(check);
  CHECK_FALSE(check.reason.has_value());
  CHECK(check.max_abs_error == 0.0);
  CHECK(check.mismatches == 0);
  CHECK((check.tolerance == ca::Tolerance{1e-2, 1e-2}));
}

TEST_CASE("one element outside the tolerance is found with its index and both values", "[torch]") {
  const at::Tensor reference = grid(4, 5);
  at::Tensor candidate = reference.clone();
  candidate[2][3] += 0.5;
  candidate[3][1] += 0.001;  // inside atol + rtol |x|
  const ca::OutputCheck check = ca::check_output(reference, candidate);
  CHECK_FALSE(check);
  REQUIRE(check.reason == ca::RejectionReason::value_mismatch);
  CHECK((check.first_index == std::vector<std::int64_t>{2, 3}));
  CHECK(check.mismatches == 1);
  CHECK(std::abs(check.max_abs_error - 0.5) < 1e-5);
  CHECK_THAT(check.message, Catch::Matchers::Contains("index [2, 3] (shape [4, 5])"));
  CHECK_THAT(check.message, Catch::Matchers::Contains("expected 1.857143, got 2.357143"));
  CHECK_THAT(check.message, Catch::Matchers::Contains("1 of 20 elements"));
}

TEST_CASE("the strict profile tightens float32 but not float16", "[torch]") {
  const at::Tensor reference = grid(3, 3);
  const at::Tensor candidate = reference + 1e-3;
  CHECK(ca::check_output(reference, candidate));
  const ca::OutputCheck strict = ca::check_output(reference, candidate, ca::TolerancePolicy::strict());
  CHECK_FALSE(strict);
  // atol follows the reference's magnitude: its root mean square here is below 1.
  CHECK((strict.tolerance == ca::TolerancePolicy::strict().for_output("float32", ca::detail::finite_rms(reference))));
  CHECK(strict.tolerance.atol < 1e-4);
  CHECK(strict.tolerance.rtol == 1e-4);
  CHECK(strict.mismatches == 9);

  const at::Tensor half = grid(3, 3, at::kHalf);
  CHECK(ca::check_output(half, (half.to(at::kFloat) + 1e-3).to(at::kHalf), ca::TolerancePolicy::strict()));
}

TEST_CASE("non-finite values fail only where the reference is finite", "[torch]") {
  at::Tensor reference = grid(2, 4);
  at::Tensor candidate = reference.clone();
  candidate[1][2] = NAN;
  candidate[0][3] = INFINITY;
  const ca::OutputCheck check = ca::check_output(reference, candidate);
  REQUIRE(check.reason == ca::RejectionReason::non_finite);
  CHECK((check.first_index == std::vector<std::int64_t>{0, 3}));
  CHECK(check.mismatches == 2);
  CHECK_THAT(check.message, Catch::Matchers::Contains("2 non-finite values where the reference is finite (1 NaN)"));

  reference[1][2] = NAN;
  candidate[0][3] = reference[0][3];
  CHECK(ca::check_output(reference, candidate));
}

TEST_CASE("structure is checked before values", "[torch]") {
  const at::Tensor reference = grid(2, 3);
  CHECK(ca::check_output(reference, grid(3, 2)).reason == ca::RejectionReason::shape_mismatch);
  CHECK_THAT(ca::check_output(reference, grid(3, 2)).message,
             Catch::Matchers::Contains("shape [3, 2], the reference [2, 3]"));
  CHECK(ca::check_output(reference, reference.to(at::kDouble)).reason == ca::RejectionReason::dtype_mismatch);
  CHECK_THAT(ca::check_output(reference, reference.to(at::kDouble)).message,
             Catch::Matchers::Contains("dtype float64, the reference float32"));
  CHECK(ca::check_output(reference, at::Tensor()).reason == ca::RejectionReason::output_type);
  CHECK_THROWS_AS(ca::check_output(at::Tensor(), reference), std::invalid_argument);
  CHECK(ca::check_output(at::empty({0, 3}), at::empty({0, 3})));
}

TEST_CASE("integers and booleans must match exactly", "[torch]") {
  const at::Tensor reference = at::arange(10, at::kLong);
  at::Tensor candidate = reference.clone();
  candidate[7] = 8;
  const ca::OutputCheck check = ca::check_output(reference, candidate);
  REQUIRE(check.reason == ca::RejectionReason::value_mismatch);
  CHECK(check.first_index == std::vector<std::int64_t>{7});
  CHECK_THAT(check.message, Catch::Matchers::Contains("expected 7, got 8"));
  CHECK_THAT(check.message, Catch::Matchers::Contains("int64 values must match exactly"));
  CHECK(ca::check_output(reference.gt(4), reference.gt(4)));
}

TEST_CASE("a policy travels to the harness as JSON and back", "[torch]") {
  const ca::TolerancePolicy strict = ca::TolerancePolicy::strict();
  const nlohmann::json form = strict;
  CHECK(form["default"]["atol"] == 1e-4);
  CHECK(form["bfloat16"]["rtol"] == 1e-2);
  CHECK(form.get<ca::TolerancePolicy>() == strict);
  CHECK(ca::dtype_name(at::kBFloat16) == "bfloat16");
}

TEST_CASE("outputs on the GPU are compared on the GPU", "[torch][gpu]") {
  if (!at::hasCUDA()) CUDA_AGENT_SKIP("no CUDA device: libtorch sees no GPU here");
  const at::Tensor reference = grid(64, 64).cuda();
  at::Tensor candidate = reference.clone();
  // The reference there is 576, so the default tolerance allows 5.77: the error must exceed that.
  candidate[63][0] -= 100.0;
  candidate[10][10] += 0.5;  // 92.9 there: inside atol + rtol |x|
  const ca::OutputCheck check = ca::check_output(reference, candidate);
  REQUIRE(check.reason == ca::RejectionReason::value_mismatch);
  CHECK((check.first_index == std::vector<std::int64_t>{63, 0}));
  CHECK(check.mismatches == 1);
  CHECK(std::abs(check.max_abs_error - 100.0) < 1e-3);
  CHECK(ca::check_output(reference, reference.cpu()).reason == ca::RejectionReason::device_mismatch);
}
