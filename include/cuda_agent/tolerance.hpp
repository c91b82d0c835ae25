// SPDX-License-Identifier: Apache-2.0
// How close a candidate's output must be to the reference's: one policy, shared by the
// Python harness (which receives it as JSON) and by in-process checks of libtorch tensors
// (cuda_agent/torch/output_check.hpp), so that both judge a kernel alike.
#pragma once

#include <map>     // map
#include <string>  // string

#include <nlohmann/json.hpp>

namespace cuda_agent {

/// Absolute and relative tolerance for one dtype: |actual - expected| <= atol + rtol |expected|.
struct Tolerance {
  double atol = 1e-2;
  double rtol = 1e-2;
  friend bool operator==(const Tolerance&, const Tolerance&) = default;
};

/// Tolerances by dtype name as PyTorch prints it without the `torch.` prefix ("float32",
/// "float16", "bfloat16", ...); integers and booleans always compare exactly.
struct TolerancePolicy {
  Tolerance fallback;
  std::map<std::string, Tolerance> by_dtype;

  /// The CUDA Agent paper's: atol = rtol = 1e-2 for every floating dtype.
  [[nodiscard]] static TolerancePolicy paper() { return {}; }
  /// KernelBench's current: 1e-4 for float32 and float64, 1e-2 for half precision.
  [[nodiscard]] static TolerancePolicy strict() {
    TolerancePolicy policy{{1e-4, 1e-4}, {}};
    policy.by_dtype["float16"] = {1e-2, 1e-2};
    policy.by_dtype["bfloat16"] = {1e-2, 1e-2};
    return policy;
  }
  [[nodiscard]] Tolerance for_dtype(const std::string& dtype) const {
    const auto found = by_dtype.find(dtype);
    return found == by_dtype.end() ? fallback : found->second;
  }
  friend bool operator==(const TolerancePolicy&, const TolerancePolicy&) = default;
};

/// {"default": {"atol": .., "rtol": ..}, "<dtype>": {...}}: the form the harness reads.
inline void to_json(nlohmann::json& out, const TolerancePolicy& policy) {
  out = {{"default", {{"atol", policy.fallback.atol}, {"rtol", policy.fallback.rtol}}}};
  for (const auto& [dtype, tolerance] : policy.by_dtype) out[dtype] = {{"atol", tolerance.atol}, {"rtol", tolerance.rtol}};
}

inline void from_json(const nlohmann::json& in, TolerancePolicy& policy) {
  policy = TolerancePolicy{};
  for (const auto& [key, value] : in.items()) {
    const Tolerance tolerance{value.at("atol").get<double>(), value.at("rtol").get<double>()};
    if (key == "default")
      policy.fallback = tolerance;
    else
      policy.by_dtype[key] = tolerance;
  }
}

}  // namespace cuda_agent
