// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `Toolchain`: everything about the tools that goes into a build (Python, torch, the
/// compilers, the GPU target), as the compile driver probed it. Its `key` is part of
/// every cache key, so a change of any tool invalidates what was built with the old one.

#include <filesystem>  // path
#include <string>      // string
#include <vector>      // vector

#include <nlohmann/json.hpp>

namespace cuda_agent {

/// Everything about the tools that goes into a build, probed once.
struct Toolchain {
  std::string device;
  std::filesystem::path python;
  std::string python_version;
  std::string extension_suffix;
  std::filesystem::path python_include_directory;
  std::string torch_version;
  std::string torch_cuda_version;
  std::filesystem::path torch_directory;
  std::vector<std::filesystem::path> torch_include_directories;
  std::filesystem::path torch_library_directory;
  bool cxx11_abi = true;
  std::filesystem::path cxx;
  std::string cxx_identity;
  std::filesystem::path cuda_home;
  std::filesystem::path nvcc;
  std::string nvcc_identity;
  /// "sm_90a" and the like; empty for device "cpu".
  std::string gpu_architecture;
  std::filesystem::path cudnn_include_directory;
  std::filesystem::path cudnn_library;
  /// SHA-256 over all of the above: part of every cache key.
  std::string key;
};

inline void to_json(nlohmann::json& out, const Toolchain& toolchain) {
  std::vector<std::string> includes;
  for (const auto& each : toolchain.torch_include_directories) includes.push_back(each.string());
  out = {{"device", toolchain.device},
         {"python", toolchain.python.string()},
         {"python_version", toolchain.python_version},
         {"extension_suffix", toolchain.extension_suffix},
         {"torch_version", toolchain.torch_version},
         {"torch_cuda_version", toolchain.torch_cuda_version},
         {"torch_include_directories", includes},
         {"torch_library_directory", toolchain.torch_library_directory.string()},
         {"cxx11_abi", toolchain.cxx11_abi},
         {"cxx", toolchain.cxx.string()},
         {"cxx_identity", toolchain.cxx_identity},
         {"nvcc", toolchain.nvcc.string()},
         {"nvcc_identity", toolchain.nvcc_identity},
         {"gpu_architecture", toolchain.gpu_architecture},
         {"cudnn_library", toolchain.cudnn_library.string()},
         {"key", toolchain.key}};
}

}  // namespace cuda_agent
