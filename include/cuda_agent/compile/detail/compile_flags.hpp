// SPDX-License-Identifier: Apache-2.0
#pragma once

// What goes on the compiler's and the linker's command lines, and what besides them
// decides what a file sees. Both feed cache keys: a flag that changed with the task
// (rather than with the toolchain) would split the object cache by task.

#include <string>   // string
#include <utility>  // move
#include <vector>   // vector

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/compile/compile_options.hpp"
#include "cuda_agent/compile/toolchain.hpp"
#include "cuda_agent/detail/sha256.hpp"
#include "cuda_agent/library_policy.hpp"

namespace cuda_agent::detail::compile {

inline std::vector<std::string> common_definitions_and_includes(const CompileOptions& options, const Toolchain& tools) {
  std::vector<std::string> flags = {"-DTORCH_EXTENSION_NAME=" + std::string(candidate_extension_name),
                                    "-DTORCH_API_INCLUDE_EXTENSION_H",
                                    std::string("-D_GLIBCXX_USE_CXX11_ABI=") + (tools.cxx11_abi ? "1" : "0")};
  for (const auto& directory : tools.torch_include_directories) {
    flags.push_back("-isystem");
    flags.push_back(directory.string());
  }
  flags.push_back("-isystem");
  flags.push_back(tools.python_include_directory.string());
  if (options.device == "cuda") {
    flags.push_back("-isystem");
    flags.push_back((tools.cuda_home / "include").string());
    // cuDNN's headers whatever the policy: only what a module links is decided by it,
    // and flags that do not change with the task keep the object cache shared.
    if (!tools.cudnn_include_directory.empty()) {
      flags.push_back("-isystem");
      flags.push_back(tools.cudnn_include_directory.string());
    }
  }
  return flags;
}

inline std::vector<std::string> cxx_flags(const CompileOptions& options, const Toolchain& tools) {
  std::vector<std::string> flags = {
      "-std=c++17", options.device == "cuda" ? options.cxx_optimization_cuda : options.cxx_optimization_cpu, "-fPIC",
      "-fvisibility=hidden", "-pipe"};
  for (auto& flag : common_definitions_and_includes(options, tools)) flags.push_back(std::move(flag));
  flags.insert(flags.end(), options.extra_cxx_flags.begin(), options.extra_cxx_flags.end());
  return flags;
}

inline std::vector<std::string> cuda_flags(const CompileOptions& options, const Toolchain& tools) {
  const std::string digits = tools.gpu_architecture.substr(tools.gpu_architecture.find('_') + 1);
  std::vector<std::string> flags = {"-std=c++17", "-O3", "-gencode=arch=compute_" + digits + ",code=sm_" + digits,
                                    "-lineinfo", "-ccbin", tools.cxx.string(), "-Xcompiler=-fPIC,-fvisibility=hidden",
                                    // torch's own defaults for CUDA sources, so that code
                                    // written for torch.utils.cpp_extension builds alike.
                                    "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                                    "--expt-relaxed-constexpr"};
  for (auto& flag : common_definitions_and_includes(options, tools)) flags.push_back(std::move(flag));
  flags.insert(flags.end(), options.extra_cuda_flags.begin(), options.extra_cuda_flags.end());
  return flags;
}

inline std::vector<std::string> link_flags(const CompileOptions& options, const Toolchain& tools,
                                           const LibraryPolicy& libraries) {
  const std::string torch_lib = tools.torch_library_directory.string();
  std::vector<std::string> flags = {"-shared", "-L" + torch_lib, "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"};
  if (options.device == "cuda") {
    for (const char* library : {"-lc10_cuda", "-ltorch_cuda"}) flags.emplace_back(library);
    flags.push_back("-L" + (tools.cuda_home / "lib64").string());
    flags.emplace_back("-lcudart");
    if (libraries.cublas) {
      flags.emplace_back("-lcublas");
      flags.emplace_back("-lcublasLt");
    }
    if (libraries.cudnn && !tools.cudnn_library.empty()) {
      flags.push_back(tools.cudnn_library.string());
      flags.push_back("-Wl,-rpath," + tools.cudnn_library.parent_path().string());
    }
  }
  flags.push_back("-Wl,-rpath," + torch_lib);
  flags.insert(flags.end(), options.extra_link_flags.begin(), options.extra_link_flags.end());
  return flags;
}

/// What decides the content of the headers a file sees besides its flags (which carry
/// the include paths and the compiler): the torch and Python versions, and the CUDA
/// toolkit for device "cuda". Deliberately not the GPU architecture (only nvcc's flags
/// name it), so that host objects and the precompiled header are shared across GPUs.
inline std::string header_content_key(const Toolchain& tools) {
  return detail::sha256_hex(tools.device + "\n" + tools.torch_version + "\n" + tools.torch_directory.string() + "\n" +
                            tools.python_version + "\n" + tools.python_include_directory.string() + "\n" +
                            tools.nvcc_identity);
}

}  // namespace cuda_agent::detail::compile
