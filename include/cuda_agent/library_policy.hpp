// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What a candidate extension may use besides its own kernels. By default, as in the
/// CUDA Agent paper: cuBLAS (for GEMM) and cuDNN (for convolutions) are allowed; torch
/// compute from C++ and loading libraries at run time are not. The host can tighten it.
/// The workspace's SKILL.md states the policy to the model, and the compile driver
/// honours it: it links only the allowed libraries and rejects an extension whose
/// dynamic symbol table still refers to a forbidden one.

#include <algorithm>    // any_of, find
#include <array>        // array
#include <cstddef>      // size_t
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include <nlohmann/json.hpp>

namespace cuda_agent {

struct LibraryPolicy {
  /// cuBLAS and cuBLASLt (GEMM, batched GEMM).
  bool cublas = true;
  /// cuDNN (convolutions).
  bool cudnn = true;
  /// Calls from C++ into torch operators that compute (`at::matmul`, `torch::relu`, ...).
  /// Creation, views, metadata and copies (`torch::empty`, `.view`, `.contiguous()`) are
  /// always allowed: they are how a binding allocates outputs and checks inputs.
  bool torch_compute_in_extension = false;
  /// `dlopen`/`dlsym` from the extension (a way around everything above).
  bool dynamic_loading = false;

  /// The allowed libraries in words, for SKILL.md and messages: "cuBLAS (GEMM) and
  /// cuDNN (convolutions)", or "no external libraries".
  [[nodiscard]] std::string allowed_libraries() const {
    std::vector<std::string> names;
    if (cublas) names.emplace_back("cuBLAS (for GEMM)");
    if (cudnn) names.emplace_back("cuDNN (for convolutions)");
    if (names.empty()) return "no external libraries";
    std::string text = names[0];
    for (std::size_t i = 1; i < names.size(); ++i) text += (i + 1 == names.size() ? " and " : ", ") + names[i];
    return text;
  }

  friend bool operator==(const LibraryPolicy&, const LibraryPolicy&) = default;
};

inline void to_json(nlohmann::json& out, const LibraryPolicy& policy) {
  out = {{"cublas", policy.cublas},
         {"cudnn", policy.cudnn},
         {"torch_compute_in_extension", policy.torch_compute_in_extension},
         {"dynamic_loading", policy.dynamic_loading}};
}

inline void from_json(const nlohmann::json& in, LibraryPolicy& policy) {
  policy.cublas = in.value("cublas", true);
  policy.cudnn = in.value("cudnn", true);
  policy.torch_compute_in_extension = in.value("torch_compute_in_extension", false);
  policy.dynamic_loading = in.value("dynamic_loading", false);
}

namespace detail {

/// Torch operators (`at::_ops::<name>`) a binding may call under any policy: allocation,
/// views and metadata, copies and conversions. Everything else computes.
inline constexpr std::array<std::string_view, 66> torch_operators_always_allowed{
    "empty_memory_format", "empty_like",    "empty_strided",  "empty_names",    "empty_permuted",
    "zeros",               "zeros_like",    "ones",           "ones_like",      "full",
    "full_like",           "new_empty",     "new_empty_strided", "new_zeros",   "new_ones",
    "new_full",            "view",          "view_dtype",     "view_as",        "reshape",
    "reshape_as",          "_reshape_alias", "_unsafe_view",  "as_strided",     "as_strided_",
    "contiguous",          "transpose_int", "transpose_",     "t",              "t_",
    "permute",             "movedim_int",   "movedim_intlist", "squeeze",       "squeeze_dim",
    "squeeze_dims",        "squeeze_",      "unsqueeze",      "unsqueeze_",     "expand",
    "expand_as",           "narrow",        "select_int",     "slice_Tensor",   "flatten_using_ints",
    "unflatten_int",       "split_Tensor",  "chunk",          "unbind_int",     "detach",
    "detach_",             "alias",         "resize_",        "to_dtype",       "to_device",
    "to_dtype_layout",     "to_other",      "_to_copy",       "copy_",          "clone",
    "zero_",               "record_stream", "item",           "_local_scalar_dense", "is_pinned",
    "lift_fresh",
};

/// The operator struct name in a mangled `at::_ops::<name>::...` symbol, or empty.
[[nodiscard]] inline std::string torch_operator_of_symbol(std::string_view symbol) {
  constexpr std::string_view prefix = "_ZN2at4_ops";
  if (symbol.substr(0, prefix.size()) != prefix) return {};
  std::size_t at = prefix.size();
  std::size_t length = 0;
  while (at < symbol.size() && symbol[at] >= '0' && symbol[at] <= '9') length = length * 10 + (symbol[at++] - '0');
  if (length == 0 || at + length > symbol.size()) return {};
  return std::string(symbol.substr(at, length));
}

/// Why `symbol`, needed by the extension, breaks `policy`; empty when it does not.
[[nodiscard]] inline std::string library_policy_violation(std::string_view symbol, const LibraryPolicy& policy) {
  auto starts = [&](std::string_view prefix) { return symbol.substr(0, prefix.size()) == prefix; };
  if (!policy.cublas && starts("cublas"))
    return "calls cuBLAS (" + std::string(symbol) + "), which the library policy does not allow here";
  if (!policy.cudnn && starts("cudnn"))
    return "calls cuDNN (" + std::string(symbol) + "), which the library policy does not allow here";
  if (!policy.dynamic_loading && (symbol == "dlopen" || symbol == "dlmopen" || symbol == "dlsym" || symbol == "dlvsym"))
    return "loads code at run time (" + std::string(symbol) + "); link what you use instead";
  if (!policy.torch_compute_in_extension) {
    const std::string op = torch_operator_of_symbol(symbol);
    if (!op.empty() && std::find(torch_operators_always_allowed.begin(), torch_operators_always_allowed.end(), op) ==
                           torch_operators_always_allowed.end())
      return "calls the torch operator at::_ops::" + op +
             " from C++; compute must happen in your own kernels (torch may only allocate, view and copy tensors)";
  }
  return {};
}

}  // namespace detail

}  // namespace cuda_agent
