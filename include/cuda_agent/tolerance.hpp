// SPDX-License-Identifier: Apache-2.0
// How close a candidate's output must be to the reference's: one policy, shared by the
// Python harness (which receives it as JSON) and by in-process checks of libtorch tensors
// (cuda_agent/torch/output_check.hpp), so that both judge a kernel alike.
#pragma once

#include <map>          // map
#include <optional>     // optional, nullopt
#include <string>       // string
#include <string_view>  // string_view

#include <nlohmann/json.hpp>

namespace cuda_agent {

/// Absolute and relative tolerance for one dtype: |actual - expected| <= atol + rtol |expected|.
struct Tolerance {
  double atol = 1e-2;
  double rtol = 1e-2;
  friend bool operator==(const Tolerance&, const Tolerance&) = default;
};

/// How the absolute part of a tolerance follows the magnitude of the reference's output:
///
///   atol_effective = atol * min(ceiling, max(floor, rms))
///
/// where `rms` is the root mean square of the finite elements of one reference output
/// tensor on one input set (absolute values for complex outputs). With the defaults,
/// outputs of order 1 and larger keep atol as given, and smaller outputs get a
/// proportionally smaller one: an output of values around 1e-4 is no longer matched by
/// zeros within an atol of 1e-2, while an output of ordinary magnitude is judged as before.
/// The floor keeps outputs that are (nearly) all zeros comparable. rtol is never scaled.
struct AtolScale {
  bool enabled = true;
  double floor = 1e-5;
  double ceiling = 1.0;
  [[nodiscard]] double factor(double rms) const noexcept {
    if (!enabled) return 1.0;
    return rms < floor ? floor : rms > ceiling ? ceiling : rms;
  }
  friend bool operator==(const AtolScale&, const AtolScale&) = default;
};

/// Tolerances by dtype name as PyTorch prints it without the `torch.` prefix ("float32",
/// "float16", "bfloat16", ...); integers and booleans always compare exactly.
struct TolerancePolicy {
  Tolerance fallback;
  std::map<std::string, Tolerance> by_dtype;
  AtolScale atol_scale;

  /// The CUDA Agent paper's: atol = rtol = 1e-2 for every floating dtype.
  [[nodiscard]] static TolerancePolicy paper() { return {}; }
  /// KernelBench's current: 1e-4 for float32 and float64, 1e-2 for half precision.
  [[nodiscard]] static TolerancePolicy strict() {
    TolerancePolicy policy{{1e-4, 1e-4}, {}, {}};
    policy.by_dtype["float16"] = {1e-2, 1e-2};
    policy.by_dtype["bfloat16"] = {1e-2, 1e-2};
    return policy;
  }
  /// The dtype's tolerance as given (atol not yet scaled).
  [[nodiscard]] Tolerance for_dtype(const std::string& dtype) const {
    const auto found = by_dtype.find(dtype);
    return found == by_dtype.end() ? fallback : found->second;
  }
  /// The tolerance for one reference output of `dtype` whose elements have root mean
  /// square `rms`: atol scaled as `atol_scale` says.
  [[nodiscard]] Tolerance for_output(const std::string& dtype, double rms) const {
    Tolerance tolerance = for_dtype(dtype);
    tolerance.atol *= atol_scale.factor(rms);
    return tolerance;
  }
  friend bool operator==(const TolerancePolicy&, const TolerancePolicy&) = default;
};

/// The tolerance profiles a request may name (`EvaluationPolicy::tolerance`), in words.
inline constexpr std::string_view tolerance_profile_names = "default: the paper's, strict: KernelBench's";

/// The tolerance profile `name`: "default" (`TolerancePolicy::paper()`) or "strict"
/// (`TolerancePolicy::strict()`); nothing for another name.
[[nodiscard]] inline std::optional<TolerancePolicy> tolerance_profile(std::string_view name) {
  if (name == "default") return TolerancePolicy::paper();
  if (name == "strict") return TolerancePolicy::strict();
  return std::nullopt;
}

/// {"default": {"atol": .., "rtol": ..}, "<dtype>": {...}, "atol_scale": {"statistic": "rms",
/// "floor": .., "ceiling": ..}}: the form the harness reads (no "atol_scale": atol unscaled).
inline void to_json(nlohmann::json& out, const TolerancePolicy& policy) {
  out = {{"default", {{"atol", policy.fallback.atol}, {"rtol", policy.fallback.rtol}}}};
  for (const auto& [dtype, tolerance] : policy.by_dtype)
    out[dtype] = {{"atol", tolerance.atol}, {"rtol", tolerance.rtol}};
  if (policy.atol_scale.enabled)
    out["atol_scale"] = {
        {"statistic", "rms"}, {"floor", policy.atol_scale.floor}, {"ceiling", policy.atol_scale.ceiling}};
}

inline void from_json(const nlohmann::json& in, TolerancePolicy& policy) {
  policy = TolerancePolicy{};
  policy.atol_scale.enabled = false;  // a policy written without it meant atol as given
  for (const auto& [key, value] : in.items()) {
    if (key == "atol_scale") {
      policy.atol_scale = {true, value.value("floor", AtolScale{}.floor), value.value("ceiling", AtolScale{}.ceiling)};
      continue;
    }
    const Tolerance tolerance{value.at("atol").get<double>(), value.at("rtol").get<double>()};
    if (key == "default")
      policy.fallback = tolerance;
    else
      policy.by_dtype[key] = tolerance;
  }
}

}  // namespace cuda_agent
