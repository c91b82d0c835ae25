// SPDX-License-Identifier: Apache-2.0
#pragma once

// The NVIDIA device nodes a sandbox needs for the GPUs it is given: the control and
// unified-memory nodes every CUDA process opens, and /dev/nvidiaN for the assigned GPUs
// only, so that CUDA inside enumerates exactly those.

#include <algorithm>   // sort, unique
#include <filesystem>  // path, directory_iterator
#include <string>      // string, to_string
#include <vector>      // vector

#include <sys/stat.h>  // stat, S_ISCHR

#include "cuda_agent/sandbox.hpp"

namespace cuda_agent::detail {

inline bool is_character_device(const std::filesystem::path& path) {
  struct stat status {};
  return ::stat(path.c_str(), &status) == 0 && S_ISCHR(status.st_mode);
}

/// The N of every /dev/nvidiaN character device under `dev`, ascending.
inline std::vector<int> nvidia_gpu_minors(const std::filesystem::path& dev = "/dev") {
  std::vector<int> minors;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dev, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 6 || name.rfind("nvidia", 0) != 0) continue;
    const std::string digits = name.substr(6);
    if (digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (is_character_device(entry.path())) minors.push_back(std::stoi(digits));
  }
  std::sort(minors.begin(), minors.end());
  return minors;
}

struct NvidiaDeviceNodes {
  /// Bound with device access; the sandbox cannot start without them.
  std::vector<std::filesystem::path> required;
  /// Bound when present (some drivers need them, others do not create them).
  std::vector<std::filesystem::path> optional;
};

/// The nodes to bind for `gpus`. Throws SandboxError naming what is missing and how to
/// get it, since CUDA inside would otherwise fail with an unhelpful "no device".
inline NvidiaDeviceNodes nvidia_device_nodes(std::vector<int> gpus, const std::filesystem::path& dev = "/dev") {
  NvidiaDeviceNodes nodes;
  if (gpus.empty()) return nodes;
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());

  if (!is_character_device(dev / "nvidiactl"))
    throw SandboxError("GPUs were requested but " + (dev / "nvidiactl").string() +
                       " does not exist: the NVIDIA kernel driver is not loaded on this host");
  if (!is_character_device(dev / "nvidia-uvm"))
    throw SandboxError((dev / "nvidia-uvm").string() +
                       " does not exist: the nvidia-uvm module is not loaded or its device node was never created, "
                       "and CUDA cannot start without it. Create it on the host once (`nvidia-modprobe -u -c=0`, "
                       "or run any CUDA program or nvidia-smi as root); a sandbox cannot create device nodes");
  nodes.required = {dev / "nvidiactl", dev / "nvidia-uvm"};
  // Driver 570 needs uvm-tools for CUDA to start (error 304 without it); 580 does not.
  // modeset only exists on hosts with a display driver.
  nodes.optional = {dev / "nvidia-uvm-tools", dev / "nvidia-modeset"};

  for (const int gpu : gpus) {
    const std::filesystem::path node = dev / ("nvidia" + std::to_string(gpu));
    if (gpu < 0 || !is_character_device(node)) {
      std::string present;
      for (const int minor : nvidia_gpu_minors(dev)) present += (present.empty() ? "" : ", ") + std::to_string(minor);
      throw SandboxError("GPU " + std::to_string(gpu) + " was requested but " + node.string() +
                         " does not exist; this host has " +
                         (present.empty() ? "no GPU device nodes" : "GPUs " + present) +
                         " (SandboxOptions::gpus holds device minor numbers, the N of /dev/nvidiaN)");
    }
    nodes.required.push_back(node);
  }
  return nodes;
}

}  // namespace cuda_agent::detail
