// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What a candidate extension may use besides its own kernels. As in the CUDA Agent
/// paper, cuBLAS is for GEMM and cuDNN for convolutions, and by default each is allowed
/// only for a task that needs it: cuBLAS where the reference multiplies matrices (or
/// convolves, which im2col makes a product), cuDNN where it convolves, as derived from
/// the operators the reference runs (`HarnessVerifier::library_policy`). Torch compute
/// from C++ and loading libraries at run time are not allowed. The host can tighten the
/// policy (`cublas = false`) or fix it (`derive_from_reference = false`: `cublas` and
/// `cudnn` then apply as they are, whatever the task). The workspace's SKILL.md states the
/// policy to the model, the compile driver links only the allowed libraries, and the
/// verifier's link check refuses an extension that calls a library the policy excludes.

#include <algorithm>    // any_of, find
#include <array>        // array
#include <cstddef>      // size_t
#include <iterator>     // begin, end
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include <nlohmann/json.hpp>

namespace cuda_agent {

struct LibraryPolicy {
  /// cuBLAS and cuBLASLt (GEMM, batched GEMM). With `derive_from_reference`, the most
  /// a task may get.
  bool cublas = true;
  /// cuDNN (convolutions). With `derive_from_reference`, the most a task may get.
  bool cudnn = true;
  /// Allow cuBLAS and cuDNN only where the task's reference needs them (see the file
  /// comment). Off: `cublas` and `cudnn` are the policy of every task.
  bool derive_from_reference = true;
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

  /// The policy of a task whose reference multiplies matrices (`multiplies`) or
  /// convolves (`convolves`): the host's own when it is fixed, else what the task needs
  /// within what the host allows. The result is fixed (`derive_from_reference` off).
  [[nodiscard]] LibraryPolicy for_task(bool multiplies, bool convolves) const {
    LibraryPolicy resolved = *this;
    if (derive_from_reference) {
      resolved.cublas = cublas && (multiplies || convolves);
      resolved.cudnn = cudnn && convolves;
    }
    resolved.derive_from_reference = false;
    return resolved;
  }

  /// Where both allow: a verifier's policy for a task within what a compile driver allows.
  [[nodiscard]] LibraryPolicy intersection(const LibraryPolicy& other) const {
    LibraryPolicy both = *this;
    both.cublas = cublas && other.cublas;
    both.cudnn = cudnn && other.cudnn;
    both.torch_compute_in_extension = torch_compute_in_extension && other.torch_compute_in_extension;
    both.dynamic_loading = dynamic_loading && other.dynamic_loading;
    both.derive_from_reference = derive_from_reference && other.derive_from_reference;
    return both;
  }

  friend bool operator==(const LibraryPolicy&, const LibraryPolicy&) = default;
};

inline void to_json(nlohmann::json& out, const LibraryPolicy& policy) {
  out = {{"cublas", policy.cublas},
         {"cudnn", policy.cudnn},
         {"derive_from_reference", policy.derive_from_reference},
         {"torch_compute_in_extension", policy.torch_compute_in_extension},
         {"dynamic_loading", policy.dynamic_loading}};
}

inline void from_json(const nlohmann::json& in, LibraryPolicy& policy) {
  policy.cublas = in.value("cublas", true);
  policy.cudnn = in.value("cudnn", true);
  policy.derive_from_reference = in.value("derive_from_reference", true);
  policy.torch_compute_in_extension = in.value("torch_compute_in_extension", false);
  policy.dynamic_loading = in.value("dynamic_loading", false);
}

namespace detail {

/// Torch operators (`at::_ops::<name>`) a binding may call under any policy: the
/// overloads of the operators the forward guard allows (guard.py's ALLOWED_ATEN of the
/// harness: creation, copies and conversions, views and metadata), and the in-place views
/// the compile driver has always let through. Everything else computes. `at::empty(...)`,
/// `t.view(...)` and the like are inline wrappers of these.
inline constexpr std::string_view torch_operators_always_allowed[] = {"_has_compatible_shallow_copy_type",
                                                                      "_local_scalar_dense",
                                                                      "_pin_memory",
                                                                      "_pin_memory_out",
                                                                      "_reshape_alias",
                                                                      "_to_copy",
                                                                      "_to_copy_out",
                                                                      "_unsafe_view",
                                                                      "_unsafe_view_out",
                                                                      "alias",
                                                                      "arange",
                                                                      "arange_out",
                                                                      "arange_start",
                                                                      "arange_start_out",
                                                                      "arange_start_step",
                                                                      "as_strided",
                                                                      "as_strided_",
                                                                      "chunk",
                                                                      "clone",
                                                                      "clone_out",
                                                                      "contiguous",
                                                                      "copy_",
                                                                      "copy__Tensor",
                                                                      "copy__float",
                                                                      "copy__int",
                                                                      "detach",
                                                                      "detach_",
                                                                      "diagonal",
                                                                      "diagonal_Dimname",
                                                                      "dim",
                                                                      "empty_like",
                                                                      "empty_like_out",
                                                                      "empty_memory_format",
                                                                      "empty_names",
                                                                      "empty_names_out",
                                                                      "empty_out",
                                                                      "empty_permuted",
                                                                      "empty_permuted_out",
                                                                      "empty_strided",
                                                                      "empty_strided_out",
                                                                      "expand",
                                                                      "expand_as",
                                                                      "fill__Scalar",
                                                                      "fill__Tensor",
                                                                      "flatten_DimnameList",
                                                                      "flatten_named_out_dim",
                                                                      "flatten_using_ints",
                                                                      "flatten_using_names",
                                                                      "full",
                                                                      "full_like",
                                                                      "full_like_out",
                                                                      "full_names",
                                                                      "full_names_out",
                                                                      "full_out",
                                                                      "imag",
                                                                      "is_contiguous",
                                                                      "is_contiguous_memory_format",
                                                                      "is_pinned",
                                                                      "is_same_size",
                                                                      "lift",
                                                                      "lift_fresh",
                                                                      "lift_fresh_copy",
                                                                      "lift_fresh_copy_out",
                                                                      "lift_out",
                                                                      "movedim_int",
                                                                      "movedim_intlist",
                                                                      "narrow",
                                                                      "narrow_Tensor",
                                                                      "new_empty",
                                                                      "new_empty_out",
                                                                      "new_empty_strided",
                                                                      "new_empty_strided_out",
                                                                      "new_full",
                                                                      "new_full_out",
                                                                      "new_ones",
                                                                      "new_ones_out",
                                                                      "new_zeros",
                                                                      "new_zeros_out",
                                                                      "numel",
                                                                      "ones",
                                                                      "ones_like",
                                                                      "ones_like_out",
                                                                      "ones_names",
                                                                      "ones_names_out",
                                                                      "ones_out",
                                                                      "permute",
                                                                      "real",
                                                                      "record_stream",
                                                                      "reshape",
                                                                      "reshape_as",
                                                                      "resize_",
                                                                      "resize_as_",
                                                                      "scalar_tensor",
                                                                      "scalar_tensor_out",
                                                                      "select_Dimname",
                                                                      "select_int",
                                                                      "select_t",
                                                                      "set_",
                                                                      "set__source_Storage",
                                                                      "set__source_Storage_storage_offset",
                                                                      "set__source_Tensor",
                                                                      "set__source_Tensor_storage_offset",
                                                                      "size",
                                                                      "size_Dimname",
                                                                      "size_int",
                                                                      "slice_Tensor",
                                                                      "slice_str",
                                                                      "slice_t",
                                                                      "split",
                                                                      "split_Tensor",
                                                                      "split_sizes",
                                                                      "split_str",
                                                                      "split_with_sizes",
                                                                      "squeeze",
                                                                      "squeeze_",
                                                                      "squeeze_dim",
                                                                      "squeeze_dimname",
                                                                      "squeeze_dims",
                                                                      "stride",
                                                                      "stride_Dimname",
                                                                      "stride_int",
                                                                      "sym_numel",
                                                                      "sym_size",
                                                                      "sym_size_int",
                                                                      "sym_storage_offset",
                                                                      "sym_stride",
                                                                      "sym_stride_int",
                                                                      "t",
                                                                      "t_",
                                                                      "to_device",
                                                                      "to_dtype",
                                                                      "to_dtype_layout",
                                                                      "to_other",
                                                                      "to_prim_Device",
                                                                      "to_prim_dtype",
                                                                      "to_prim_other",
                                                                      "transpose_",
                                                                      "transpose_Dimname",
                                                                      "transpose_int",
                                                                      "unbind_Dimname",
                                                                      "unbind_int",
                                                                      "unflatten_Dimname",
                                                                      "unflatten_int",
                                                                      "unfold",
                                                                      "unsqueeze",
                                                                      "unsqueeze_",
                                                                      "view",
                                                                      "view_as",
                                                                      "view_as_complex",
                                                                      "view_as_real",
                                                                      "view_dtype",
                                                                      "zero_",
                                                                      "zeros",
                                                                      "zeros_like",
                                                                      "zeros_like_out",
                                                                      "zeros_names",
                                                                      "zeros_names_out",
                                                                      "zeros_out",
                                                                      "item",
                                                                      "view_as_real_copy",
                                                                      "view_copy",
                                                                      "view_copy_dtype",
                                                                      "expand_copy",
                                                                      "permute_copy",
                                                                      "transpose_copy_int"};

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
    if (!op.empty() && std::find(std::begin(torch_operators_always_allowed), std::end(torch_operators_always_allowed),
                                 op) == std::end(torch_operators_always_allowed))
      return "calls the torch operator at::_ops::" + op +
             " from C++; compute must happen in your own kernels (torch may only allocate, view and copy tensors)";
  }
  return {};
}

}  // namespace detail

}  // namespace cuda_agent
