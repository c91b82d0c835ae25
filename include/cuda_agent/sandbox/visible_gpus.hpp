// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The GPUs a cluster's engine reserved for a process, as the sandbox names them. Ray and
/// Slurm hand a job its GPUs in CUDA_VISIBLE_DEVICES, as CUDA indices (PCI bus order, as
/// nvidia-smi numbers them) or GPU UUIDs; a sandbox binds /dev/nvidiaN by the driver's
/// minor number N (`SandboxOptions::gpus`), which need not be the index.

#include <algorithm>    // sort, find_if
#include <cstddef>      // size_t
#include <filesystem>   // path, directory_iterator
#include <fstream>      // ifstream
#include <sstream>      // istringstream
#include <stdexcept>    // invalid_argument
#include <string>       // string, to_string, getline
#include <string_view>  // string_view
#include <vector>       // vector

namespace cuda_agent {

/// One GPU as the NVIDIA driver lists it under /proc/driver/nvidia/gpus/BUS/information.
struct DriverGpu {
  std::string bus;
  std::string uuid;
  int minor = -1;
};

/// The driver's GPUs in CUDA index order (sorted by PCI bus); empty where `driver` does not
/// exist (no NVIDIA driver, or a machine without /proc).
inline std::vector<DriverGpu> driver_gpus(const std::filesystem::path& driver = "/proc/driver/nvidia/gpus") {
  std::vector<DriverGpu> gpus;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(driver, error)) {
    DriverGpu gpu{entry.path().filename().string(), "", -1};
    std::ifstream information(entry.path() / "information");
    for (std::string line; std::getline(information, line);) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      value.erase(value.find_last_not_of(" \t\r") + 1);
      if (line.rfind("Device Minor", 0) == 0) {
        try {
          gpu.minor = std::stoi(value);
        } catch (const std::exception&) {
          gpu.minor = -1;
        }
      }
      if (line.rfind("GPU UUID", 0) == 0) gpu.uuid = value;
    }
    if (gpu.minor >= 0) gpus.push_back(gpu);
  }
  std::sort(gpus.begin(), gpus.end(), [](const DriverGpu& a, const DriverGpu& b) { return a.bus < b.bus; });
  return gpus;
}

/// The device minors of the GPUs that `visible` (a CUDA_VISIBLE_DEVICES value) names, in its
/// order: an index is the index-th of `gpus`, a UUID ("GPU-…", "MIG-…") the GPU that has it.
/// Without `gpus` (no driver listing), indices are taken as minors. Throws
/// std::invalid_argument for an empty value, an entry that is neither, an index beyond the
/// machine's GPUs and a UUID no GPU has.
inline std::vector<int> visible_gpu_minors(std::string_view visible, const std::vector<DriverGpu>& gpus) {
  if (visible.empty()) throw std::invalid_argument("CUDA_VISIBLE_DEVICES is empty: no GPU was reserved");
  std::vector<int> minors;
  std::istringstream items{std::string(visible)};
  for (std::string item; std::getline(items, item, ',');) {
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      const auto found = std::find_if(gpus.begin(), gpus.end(), [&](const DriverGpu& gpu) { return gpu.uuid == item; });
      if (found == gpus.end()) throw std::invalid_argument("no GPU of this machine has the UUID " + item);
      minors.push_back(found->minor);
      continue;
    }
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("'" + item + "' is neither a GPU index nor a GPU UUID");
    const auto index = static_cast<std::size_t>(std::stoi(item));
    if (gpus.empty()) {
      minors.push_back(static_cast<int>(index));
    } else if (index < gpus.size()) {
      minors.push_back(gpus[index].minor);
    } else {
      throw std::invalid_argument("GPU " + item + " is named, and this machine has " + std::to_string(gpus.size()));
    }
  }
  return minors;
}

}  // namespace cuda_agent
