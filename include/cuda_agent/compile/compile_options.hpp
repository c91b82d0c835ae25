// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What the compile driver is configured with (`CompileOptions`, where the shared cache
/// lives by default), and the error it throws when it cannot work at all.

#include <chrono>       // milliseconds
#include <cstddef>      // size_t
#include <cstdlib>      // getenv
#include <filesystem>   // path, temp_directory_path
#include <functional>   // function
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include <unistd.h>  // geteuid

#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/process.hpp"

namespace cuda_agent {

/// target, an unusable cache. What a candidate's sources do is never reported this way:
/// that is a `CompileResult`.
class CompileDriverError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CompileOptions {
  /// "cuda": nvcc for `.cu`, g++ for `.cpp`, linked against torch's CUDA libraries.
  /// "cpu": g++ only (`.cpp`), for C++ CPU extensions (the CI path).
  std::string device = "cuda";
  /// The shared cache (toolchain probes, precompiled headers, objects). Empty: see
  /// `default_compile_cache_directory()`. The sandbox user must be able to read it.
  std::filesystem::path cache_directory;
  /// The Python with torch whose headers and libraries the extension uses. Empty:
  /// `$CUDA_AGENT_PYTHON`, else `python3` on PATH.
  std::filesystem::path python;
  /// The host C++ compiler (also nvcc's host compiler and the linker driver).
  std::string cxx = "g++";
  /// The CUDA toolkit. Empty: `$CUDA_HOME`, else `/usr/local/cuda`.
  std::filesystem::path cuda_home;
  /// Target, e.g. "sm_90a", "sm_90" or "90". Empty: detected once with nvidia-smi (GPU
  /// `gpu_index`), preferring the architecture-specific variant ("sm_90a") nvcc offers,
  /// since the code only ever runs on the GPU that evaluates it.
  std::string gpu_architecture;
  int gpu_index = 0;
  /// What the candidate may link against and call.
  LibraryPolicy libraries;
  /// Wall-clock limit for compiling and linking one candidate (the precompiled header,
  /// built once per toolchain, has its own limit below).
  std::chrono::milliseconds timeout{300'000};
  std::chrono::milliseconds precompiled_header_timeout{1'800'000};
  /// Translation units compiled at once; 0: the number of hardware threads (at most 8).
  /// The sandbox's `run` is then called from several threads at once.
  std::size_t jobs = 0;
  /// Bytes of compiler output kept in `CompileResult::log` (head and tail).
  std::size_t log_limit = 256 * 1024;
  /// Build C++ files that include torch with a shared precompiled header.
  bool precompiled_header = true;
  /// The precompiled header of files that include torch (and so, what it makes cheap).
  /// GCC instantiates and emits, in every file that uses a precompiled header, the
  /// templates its inline functions need: the lighter the header, the cheaper each file.
  std::vector<std::string> precompiled_header_includes = {"torch/python.h"};
  /// The precompiled header of files that include torch's C++ frontend (see
  /// `precompiled_header_frontend_prefixes`), which the one above does not hold: given
  /// that one, they would parse the frontend each time.
  std::vector<std::string> precompiled_header_frontend_includes = {"torch/extension.h"};
  /// Includes that make a file use the frontend header: an include whose name starts with
  /// one of these ("torch/nn" covers torch/nn.h and everything under torch/nn/).
  std::vector<std::string> precompiled_header_frontend_prefixes = {
      "torch/extension.h", "torch/torch.h",   "torch/all.h", "torch/script.h",   "torch/nn",    "torch/optim",
      "torch/data",        "torch/serialize", "torch/jit",   "torch/autograd.h", "torch/fft.h", "torch/linalg.h"};
  /// Additional includes of both headers for device "cuda".
  std::vector<std::string> precompiled_header_cuda_includes = {"ATen/cuda/CUDAContext.h", "c10/cuda/CUDAGuard.h"};
  /// Optimization of host C++ files. In "cuda" builds they hold bindings: glue whose
  /// calls go into libtorch, where -O1 compiles in 70% of the time of -O2 (-O0 is no
  /// faster: it emits six times the code). In "cpu" builds they hold the kernels.
  std::string cxx_optimization_cuda = "-O1";
  std::string cxx_optimization_cpu = "-O3";
  std::vector<std::string> extra_cxx_flags;
  std::vector<std::string> extra_cuda_flags;
  std::vector<std::string> extra_link_flags;
  /// When set and the driver runs as root: the user and group the sandbox runs commands
  /// as; the build directory's output folders are handed to them.
  std::optional<UserIdentity> sandbox_user;
  /// Limits on the candidate sources read.
  detail::TreeReadLimits source_limits;
  /// Called with short progress lines ("compiling kernels/relu.cu", ...), possibly
  /// from several threads (never at once).
  std::function<void(std::string_view)> progress;
};

/// `$CUDA_AGENT_CACHE_DIR`, else `/var/cache/cuda-agent` when running as root (readable
/// by the sandbox user, unlike `/root`), else `$XDG_CACHE_HOME/cuda-agent`, else
/// `$HOME/.cache/cuda-agent`; with `compile/` appended.
[[nodiscard]] inline std::filesystem::path default_compile_cache_directory() {
  if (const char* explicit_directory = std::getenv("CUDA_AGENT_CACHE_DIR"); explicit_directory && *explicit_directory)
    return std::filesystem::path(explicit_directory) / "compile";
  if (::geteuid() == 0) return "/var/cache/cuda-agent/compile";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "cuda-agent" / "compile";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "cuda-agent" / "compile";
  return std::filesystem::temp_directory_path() / "cuda-agent" / "compile";
}

}  // namespace cuda_agent
