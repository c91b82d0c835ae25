// SPDX-License-Identifier: Apache-2.0
// Judging a kernel's output against a reference output in-process, with libtorch tensors.
//
// An inference server that tunes kernels on the fly holds the tensors in C++: before it
// swaps a new kernel in, it can compare the kernel's output on live inputs with the output
// of the implementation it replaces, under the same tolerance policy and with the same
// reasons and messages as the evaluation harness (non-finite values where the reference is
// finite fail first; then the first element outside atol + rtol |expected|).
//
//   const cuda_agent::OutputCheck check = cuda_agent::check_output(reference, candidate);
//   if (!check) log(check.message);   // "output differs from the reference at index [3, 17] ..."
#pragma once

#include <algorithm>  // max, transform
#include <cctype>     // tolower
#include <cmath>      // sqrt
#include <cstdint>    // int64_t
#include <optional>   // optional
#include <sstream>    // ostringstream
#include <stdexcept>  // invalid_argument
#include <string>     // string
#include <string_view>
#include <vector>  // vector

#include <ATen/ATen.h>

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/tolerance.hpp"

namespace cuda_agent {

/// The outcome of comparing one output tensor with its reference.
struct OutputCheck {
  bool passed = true;
  /// Why it failed: output_type, shape_mismatch, dtype_mismatch, device_mismatch, non_finite or
  /// value_mismatch.
  std::optional<RejectionReason> reason;
  /// What a person or a model can act on: the first offending index, expected and actual values.
  std::string message;
  double max_abs_error = 0.0;
  /// Relative to max(|expected|, atol): near zero a relative error says nothing.
  double max_rel_error = 0.0;
  /// Elements outside the tolerance (or non-finite where the reference is finite).
  std::int64_t mismatches = 0;
  std::vector<std::int64_t> first_index;
  Tolerance tolerance;

  explicit operator bool() const noexcept { return passed; }
};

/// A dtype's name as PyTorch prints it without `torch.` ("float32", "bfloat16", "int64"):
/// the key of TolerancePolicy::by_dtype.
[[nodiscard]] inline std::string dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::ComplexFloat:
      return "complex64";
    case c10::ScalarType::ComplexDouble:
      return "complex128";
    case c10::ScalarType::Bool:
      return "bool";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Long:
      return "int64";
    default: {
      std::string name = c10::toString(type);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return name;
    }
  }
}

namespace detail {

inline std::vector<std::int64_t> unravel_index(std::int64_t flat, at::IntArrayRef shape) {
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    const std::int64_t extent = std::max<std::int64_t>(shape[axis], 1);
    index[axis] = flat % extent;
    flat /= extent;
  }
  return index;
}

inline std::string format_index(const std::vector<std::int64_t>& index) {
  std::ostringstream out;
  out << "[";
  for (std::size_t axis = 0; axis < index.size(); ++axis) out << (axis ? ", " : "") << index[axis];
  out << "]";
  return out.str();
}

inline std::string format_shape(at::IntArrayRef shape) {
  return format_index(std::vector<std::int64_t>(shape.begin(), shape.end()));
}

/// One element as text, read on the CPU.
inline std::string element_text(const at::Tensor& flat, std::int64_t at) {
  const at::Tensor value = flat[at].cpu();
  std::ostringstream out;
  out.precision(7);
  if (value.is_complex()) {
    const at::Tensor parts = at::view_as_real(value.to(at::kComplexDouble));
    out << parts[0].item<double>() << (parts[1].item<double>() < 0 ? "" : "+") << parts[1].item<double>() << "j";
  } else if (value.is_floating_point()) {
    out << value.item<double>();
  } else if (value.scalar_type() == at::kBool) {
    out << (value.item<bool>() ? "True" : "False");
  } else {
    out << value.item<std::int64_t>();
  }
  return out.str();
}

inline OutputCheck failed_check(RejectionReason reason, std::string message) {
  OutputCheck check;
  check.passed = false;
  check.reason = reason;
  check.message = std::move(message);
  return check;
}

/// The root mean square of the finite elements of `tensor` (absolute values if complex):
/// what `TolerancePolicy::for_output` scales atol by, as the harness computes it.
inline double finite_rms(const at::Tensor& tensor) {
  const at::Tensor values = (tensor.is_complex() ? tensor.abs() : tensor).to(at::kDouble).reshape(-1);
  const at::Tensor finite = at::isfinite(values);
  const auto count = finite.sum().item<std::int64_t>();
  if (count == 0) return 0.0;
  return std::sqrt(at::where(finite, values, at::zeros({}, values.options())).square().sum().item<double>() /
                   static_cast<double>(count));
}

}  // namespace detail

/// Compares `actual` with `expected`: structure first (defined, shape, dtype, device type),
/// then values under `policy` for floating and complex dtypes, exactly for the others. `what`
/// names the output in messages. Both tensors are left untouched; the comparison runs on
/// `expected`'s device in float32 (float64 for float64 inputs).
[[nodiscard]] inline OutputCheck check_output(const at::Tensor& expected, const at::Tensor& actual,
                                              const TolerancePolicy& policy = TolerancePolicy::paper(),
                                              std::string_view what = "output") {
  const std::string name(what);
  if (!expected.defined()) throw std::invalid_argument("check_output: the reference tensor is undefined");
  if (!actual.defined())
    return detail::failed_check(RejectionReason::output_type, name + " is an undefined tensor; a tensor of shape " +
                                                                  detail::format_shape(expected.sizes()) +
                                                                  " is expected.");
  if (actual.sizes() != expected.sizes())
    return detail::failed_check(RejectionReason::shape_mismatch,
                                name + " has shape " + detail::format_shape(actual.sizes()) + ", the reference " +
                                    detail::format_shape(expected.sizes()) + ".");
  if (actual.scalar_type() != expected.scalar_type())
    return detail::failed_check(RejectionReason::dtype_mismatch,
                                name + " has dtype " + dtype_name(actual.scalar_type()) + ", the reference " +
                                    dtype_name(expected.scalar_type()) + ".");
  if (actual.device().type() != expected.device().type())
    return detail::failed_check(
        RejectionReason::device_mismatch,
        name + " is on " + actual.device().str() + ", the reference on " + expected.device().str() + ".");

  OutputCheck check;
  const bool floating = expected.is_floating_point() || expected.is_complex();
  check.tolerance = floating ? policy.for_output(dtype_name(expected.scalar_type()), detail::finite_rms(expected))
                             : Tolerance{0.0, 0.0};
  if (expected.numel() == 0) return check;

  const at::Tensor expected_flat = expected.reshape(-1);
  const at::Tensor actual_flat = actual.reshape(-1).to(expected.device());
  const std::string shape = detail::format_shape(expected.sizes());
  const auto total = expected.numel();

  if (!floating) {
    const at::Tensor wrong = actual_flat.ne(expected_flat);
    check.mismatches = wrong.sum().item<std::int64_t>();
    if (check.mismatches == 0) return check;
    const std::int64_t first = wrong.to(at::kByte).argmax().item<std::int64_t>();
    check.first_index = detail::unravel_index(first, expected.sizes());
    check.passed = false;
    check.reason = RejectionReason::value_mismatch;
    check.message = name + " differs from the reference at index " + detail::format_index(check.first_index) +
                    " (shape " + shape + "): expected " + detail::element_text(expected_flat, first) + ", got " +
                    detail::element_text(actual_flat, first) + "; " + std::to_string(check.mismatches) + " of " +
                    std::to_string(total) + " elements differ (" + dtype_name(expected.scalar_type()) +
                    " values must match exactly).";
    return check;
  }

  const auto working = expected.is_complex()
                           ? (expected.scalar_type() == at::kComplexDouble ? at::kComplexDouble : at::kComplexFloat)
                           : (expected.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  const at::Tensor e = expected_flat.to(working);
  const at::Tensor a = actual_flat.to(working);
  const double atol = check.tolerance.atol;
  const double rtol = check.tolerance.rtol;

  const at::Tensor e_finite = at::isfinite(e);
  const at::Tensor a_finite = at::isfinite(a);
  // abs() of a complex tensor is real, so everything below is real.
  const at::Tensor distance = (a - e).abs();
  const at::Tensor difference = at::where(e_finite.logical_and(a_finite), distance, at::zeros({}, distance.options()));
  const std::int64_t worst = difference.argmax().item<std::int64_t>();
  check.max_abs_error = difference[worst].item<double>();
  check.max_rel_error = (difference / e.abs().clamp_min(std::max(atol, 1e-30))).max().item<double>();

  const at::Tensor broken = e_finite.logical_and(a_finite.logical_not());
  if (const auto broken_count = broken.sum().item<std::int64_t>(); broken_count > 0) {
    const std::int64_t first = broken.to(at::kByte).argmax().item<std::int64_t>();
    const auto nan_count = broken.logical_and(at::isnan(a)).sum().item<std::int64_t>();
    check.first_index = detail::unravel_index(first, expected.sizes());
    check.mismatches = broken_count;
    check.passed = false;
    check.reason = RejectionReason::non_finite;
    check.message = name + " holds " + std::to_string(broken_count) +
                    " non-finite values where the reference is finite (" + std::to_string(nan_count) +
                    " NaN); the first is at index " + detail::format_index(check.first_index) + ": expected " +
                    detail::element_text(expected_flat, first) + ", got " + detail::element_text(actual_flat, first) +
                    ".";
    return check;
  }

  const at::Tensor wrong = at::isclose(a, e, rtol, atol, /*equal_nan=*/true).logical_not();
  check.mismatches = wrong.sum().item<std::int64_t>();
  if (check.mismatches == 0) return check;
  const std::int64_t first = wrong.to(at::kByte).argmax().item<std::int64_t>();
  check.first_index = detail::unravel_index(first, expected.sizes());
  check.passed = false;
  check.reason = RejectionReason::value_mismatch;
  std::ostringstream message;
  message.precision(3);
  const double want = e[first].abs().item<double>();
  message << name << " differs from the reference at index " << detail::format_index(check.first_index) << " (shape "
          << shape << "): expected " << detail::element_text(expected_flat, first) << ", got "
          << detail::element_text(actual_flat, first) << " (|difference| " << difference[first].item<double>()
          << " > atol " << atol << " + rtol " << rtol << " x |expected| = " << atol + rtol * want << "). "
          << check.mismatches << " of " << total << " elements ("
          << 100.0 * static_cast<double>(check.mismatches) / static_cast<double>(total)
          << "%) are outside the tolerance; the largest difference is " << check.max_abs_error << " at index "
          << detail::format_index(detail::unravel_index(worst, expected.sizes())) << ".";
  check.message = message.str();
  return check;
}

}  // namespace cuda_agent
