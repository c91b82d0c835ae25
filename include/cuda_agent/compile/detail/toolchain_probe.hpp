// SPDX-License-Identifier: Apache-2.0
#pragma once

// Probes the toolchain once: one Python subprocess for torch's paths, ABI and
// EXT_SUFFIX (its answer cached on disk until the interpreter or torch changes), the
// compilers' identities, and the GPU architecture to target. The probe runs only trusted
// programs, directly rather than in the sandbox.

#include <algorithm>     // replace, remove, remove_if
#include <cctype>        // isspace
#include <chrono>        // seconds, minutes
#include <cstdlib>       // getenv
#include <exception>     // exception
#include <filesystem>    // path, exists
#include <string>        // string, to_string
#include <system_error>  // error_code
#include <utility>       // move
#include <vector>        // vector

#include <unistd.h>  // access, X_OK

#include <nlohmann/json.hpp>

#include "cuda_agent/compile/compile_options.hpp"
#include "cuda_agent/compile/detail/build_support.hpp"
#include "cuda_agent/compile/toolchain.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/python_interpreter.hpp"
#include "cuda_agent/detail/sha256.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/resources.hpp"

namespace cuda_agent::detail::compile {

inline std::string compiler_identity(std::vector<std::string> argv) {
  const std::string program = argv.front();
  const ProcessResult ran = run_trusted(std::move(argv), std::chrono::seconds(60));
  if (!ran.succeeded())
    throw CompileDriverError("cannot run " + program + " (" + describe_exit(ran) + "): " + ran.standard_output.text +
                             ran.standard_error.text);
  std::string text = ran.standard_output.text;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

inline std::string target_architecture(const CompileOptions& options, const Toolchain& tools) {
  std::string architecture = options.gpu_architecture;
  if (architecture.empty()) {
    const auto smi = find_program("nvidia-smi", Environment::inherit_all());
    if (!smi)
      throw CompileDriverError(
          "no GPU architecture to target: nvidia-smi is not available; set CompileOptions::gpu_architecture "
          "(for example \"sm_90a\")");
    const ProcessResult ran = run_trusted(
        {smi->string(), "--query-gpu=compute_cap", "--format=csv,noheader", "-i", std::to_string(options.gpu_index)},
        std::chrono::seconds(60));
    std::string capability = ran.standard_output.text;
    capability.erase(std::remove_if(capability.begin(), capability.end(),
                                    [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }),
                     capability.end());
    if (!ran.succeeded() || capability.empty() || capability.find('.') == std::string::npos)
      throw CompileDriverError("cannot read the compute capability of GPU " + std::to_string(options.gpu_index) +
                               " from nvidia-smi (" + describe_exit(ran) + "): " + ran.standard_output.text +
                               "; set CompileOptions::gpu_architecture");
    capability.erase(capability.find('.'), 1);
    architecture = "sm_" + capability;
    // The architecture-specific variant ("sm_90a") unlocks wgmma/TMA-class features;
    // the module only ever runs on this GPU, so take it where nvcc offers it.
    const ProcessResult codes = run_trusted({tools.nvcc.string(), "--list-gpu-code"}, std::chrono::seconds(60));
    if (codes.succeeded() && codes.standard_output.text.find(architecture + "a\n") != std::string::npos)
      architecture += "a";
    return architecture;
  }
  if (architecture.rfind("sm_", 0) != 0 && architecture.rfind("compute_", 0) != 0) architecture = "sm_" + architecture;
  std::string digits = architecture.substr(architecture.find('_') + 1);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  return "sm_" + digits;
}

/// Runs the probe script, or takes its earlier answer from the cache when neither the
/// interpreter nor torch changed since.
inline nlohmann::json probe_python(const CompileOptions& options, const std::filesystem::path& python,
                                   const ReportProgress& report) {
  const std::string identity = file_stamp(python);
  const std::filesystem::path cached =
      options.cache_directory / "toolchains" / ("python-" + detail::sha256_hex(python.string()) + ".json");
  std::error_code missing;
  if (std::filesystem::exists(cached, missing)) {
    try {
      const nlohmann::json entry = nlohmann::json::parse(detail::read_file(cached));
      if (entry.value("python_stamp", "") == identity &&
          entry.value("torch_stamp", "") == file_stamp(entry.at("probe").value("torch_version_file", "")))
        return entry.at("probe");
    } catch (const std::exception&) {
      // An unreadable entry is replaced below.
    }
  }
  report("probing " + python.string() + " for torch's headers and libraries");
  const auto script = embedded_resource("compile/probe_toolchain.py");
  if (!script) throw CompileDriverError("the embedded compile/probe_toolchain.py is missing from this build");
  const ProcessResult ran = run_trusted({python.string(), "-c", std::string(*script)}, std::chrono::minutes(5));
  if (!ran.succeeded())
    throw CompileDriverError("cannot query torch through " + python.string() + " (" + describe_exit(ran) +
                             "): " + ran.standard_error.text + ran.standard_output.text +
                             "\nSet CompileOptions::python or CUDA_AGENT_PYTHON to a Python with torch.");
  nlohmann::json probe = nlohmann::json::parse(ran.standard_output.text, nullptr, false);
  if (probe.is_discarded() || !probe.is_object())
    throw CompileDriverError("the toolchain probe printed no JSON: " + ran.standard_output.text);
  detail::write_file_atomically(cached,
                                nlohmann::json{{"python_stamp", identity},
                                               {"torch_stamp", file_stamp(probe.value("torch_version_file", ""))},
                                               {"probe", probe}}
                                    .dump(2));
  return probe;
}

inline Toolchain probe_toolchain(const CompileOptions& options, const ReportProgress& report) {
  Toolchain tools;
  tools.device = options.device;
  const auto located = detail::locate_python(options.python);
  if (!located)
    throw CompileDriverError("cannot find the Python interpreter '" +
                             detail::configured_python(options.python).string() + "' on PATH");
  const std::filesystem::path& python = *located;
  tools.python = python;
  const nlohmann::json probe = probe_python(options, python, report);
  tools.python_version = probe.value("python_version", "");
  tools.extension_suffix = probe.value("extension_suffix", ".so");
  tools.python_include_directory = probe.value("python_include_directory", "");
  tools.torch_version = probe.value("torch_version", "");
  auto text_of = [&](const char* key) {
    const auto found = probe.find(key);
    return found != probe.end() && found->is_string() ? found->get<std::string>() : std::string();
  };
  tools.torch_cuda_version = text_of("torch_cuda_version");
  tools.torch_directory = probe.value("torch_directory", "");
  for (const auto& each : probe.value("torch_include_directories", nlohmann::json::array()))
    tools.torch_include_directories.emplace_back(each.get<std::string>());
  tools.torch_library_directory = probe.value("torch_library_directory", "");
  tools.cxx11_abi = probe.value("cxx11_abi", true);
  tools.cudnn_library = text_of("cudnn_library");
  tools.cudnn_include_directory = text_of("cudnn_include_directory");

  tools.cxx = resolve_program(options.cxx, "the C++ compiler");
  const std::string cxx_version = compiler_identity({tools.cxx.string(), "--version"});
  tools.cxx_identity = cxx_version.substr(0, cxx_version.find('\n')) + " (" + tools.cxx.string() + ", " +
                       compiler_identity({tools.cxx.string(), "-dumpmachine"}) + ")";

  if (options.device == "cuda") {
    tools.cuda_home = options.cuda_home;
    if (tools.cuda_home.empty()) {
      const char* configured = std::getenv("CUDA_HOME");
      tools.cuda_home = configured && *configured ? configured : "/usr/local/cuda";
    }
    tools.nvcc = tools.cuda_home / "bin" / "nvcc";
    if (::access(tools.nvcc.c_str(), X_OK) != 0)
      throw CompileDriverError("no nvcc at " + tools.nvcc.string() +
                               "; set CompileOptions::cuda_home (or CUDA_HOME) to the CUDA toolkit");
    // "Cuda compilation tools, release 13.0, V13.0.88" and "Build cuda_13.0.r13.0/compiler...".
    const std::string nvcc_version = compiler_identity({tools.nvcc.string(), "--version"});
    const auto release = nvcc_version.find("release");
    tools.nvcc_identity =
        tools.nvcc.string() + ": " + (release == std::string::npos ? nvcc_version : nvcc_version.substr(release));
    std::replace(tools.nvcc_identity.begin(), tools.nvcc_identity.end(), '\n', ' ');
    tools.gpu_architecture = target_architecture(options, tools);
    if (tools.cudnn_library.empty() && std::filesystem::exists(tools.cuda_home / "lib64" / "libcudnn.so"))
      tools.cudnn_library = tools.cuda_home / "lib64" / "libcudnn.so";
  }

  detail::Sha256 hash;
  hash.update("cuda-agent toolchain v1\n");
  nlohmann::json described = tools;
  described.erase("key");
  hash.update(described.dump());
  tools.key = hash.hex_digest();
  return tools;
}

}  // namespace cuda_agent::detail::compile
