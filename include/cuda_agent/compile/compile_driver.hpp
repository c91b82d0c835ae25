// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The compile driver: builds a candidate directory's `kernels/` into one importable
/// Python extension, `<build_dir>/cuda_extension<EXT_SUFFIX>`, fast enough that an agent
/// can rebuild after every edit.
///
/// How it is fast:
///  - **Object cache, content-addressed and shared.** Each translation unit's object is
///    stored under the SHA-256 of its source, every candidate header it includes (learnt
///    from the compiler's `-MD` depfile and remembered in a manifest), the flags, the
///    compiler's identity and the torch version. Workspaces, episodes and processes share
///    it; a change to one `.cu` file recompiles that file only.
///  - **Precompiled headers** of the torch and pybind11 includes, built once per
///    toolchain and shared (flock-protected), for the C++ files that include torch. Two
///    of them: `torch/python.h` (tensors, TORCH_CHECK, pybind11 with torch's casters: what
///    a binding needs), and `torch/extension.h` for the files that include torch's C++
///    frontend. Whatever a precompiled header holds, every file given it pays to
///    instantiate and emit, so a binding on the first compiles in about half the time.
///  - **Parallel compiles** of the translation units, and no relink when nothing changed.
///  - **The toolchain is probed once** (torch paths, ABI, EXT_SUFFIX: one Python
///    subprocess) and cached on disk; the GPU architecture is detected once.
///
/// How it is safe: candidate sources are untrusted, so they are first copied into the
/// build directory without following symbolic links, and every compiler and linker
/// invocation that reads them runs through a `Sandbox` (an `#include "/etc/shadow"` reads
/// whatever the sandbox lets it read, and a confining sandbox lets it read nothing of
/// the kind). Cache writes are atomic (temporary file, then rename), so concurrent builds
/// from threads and processes never see torn objects. The finished module's dynamic
/// symbol table is checked against the `LibraryPolicy`.
///
/// What the sandbox must provide (see `sandbox_requirements`): the build directory
/// read-write at the same path, and read access to the toolchain (system directories, the
/// CUDA toolkit, the Python prefix with torch) and to the cache's `pch/` folder.

#include <algorithm>     // sort, find, any_of, min
#include <atomic>        // atomic
#include <cctype>        // isspace
#include <chrono>        // steady_clock, milliseconds, duration
#include <cstddef>       // size_t
#include <cstdlib>       // getenv
#include <exception>     // exception_ptr, current_exception, rethrow_exception
#include <filesystem>    // path, create_directories, ...
#include <functional>    // function
#include <map>           // map
#include <memory>        // unique_ptr, make_unique
#include <mutex>         // mutex, lock_guard
#include <optional>      // optional
#include <set>           // set
#include <stdexcept>     // runtime_error
#include <stop_token>    // stop_source
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code, system_error
#include <thread>        // jthread, hardware_concurrency
#include <utility>       // move, pair
#include <vector>        // vector

#include <sys/types.h>  // uid_t, gid_t
#include <unistd.h>     // geteuid

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/compile/detail/compiler_diagnostics.hpp"
#include "cuda_agent/compile/detail/elf_symbols.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/head_tail_buffer.hpp"
#include "cuda_agent/detail/ownership.hpp"
#include "cuda_agent/detail/python_interpreter.hpp"
#include "cuda_agent/detail/sha256.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/sandbox.hpp"

namespace cuda_agent {

/// The driver itself could not work: no Python with torch, no compiler, no GPU to
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

/// What a sandbox must let the compile commands reach, at the same paths.
struct SandboxRequirements {
  std::vector<std::filesystem::path> read_only;
  std::vector<std::filesystem::path> read_write;
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

/// Located diagnostics in g++/nvcc/ld output (see detail/compiler_diagnostics.hpp).
[[nodiscard]] inline std::vector<Diagnostic> parse_compiler_diagnostics(std::string_view output,
                                                                        std::string_view source_root = {},
                                                                        std::string_view unit = {}) {
  return detail::parse_compiler_diagnostics(output, source_root, unit);
}

namespace detail::compile {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// "3 s", "2.5 s", "0.25 s".
inline std::string format_seconds(double seconds) {
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  if (const auto dot = text.find('.'); dot != std::string::npos && text.size() > dot + 3) text.resize(dot + 3);
  return text + " s";
}

inline std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string joined;
  for (std::size_t i = 0; i < parts.size(); ++i) joined += (i ? std::string(separator) : "") + parts[i];
  return joined;
}

/// Runs a trusted helper (python probe, compiler identity, nvidia-smi) directly.
inline ProcessResult run_trusted(std::vector<std::string> argv, std::chrono::milliseconds timeout,
                                 std::optional<std::string> stdin_data = std::nullopt) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.environment = Environment::inherit_all();
  spec.environment.set("LC_ALL", "C");
  spec.timeout = timeout;
  spec.stdin_data = std::move(stdin_data);
  spec.output_limit = 256 * 1024;
  return run_process(spec);
}

inline std::filesystem::path resolve_program(const std::string& name, std::string_view what) {
  const auto found = find_program(name, Environment::inherit_all());
  if (!found) throw CompileDriverError("cannot find " + std::string(what) + " '" + name + "' on PATH");
  std::error_code error;
  const auto canonical = std::filesystem::canonical(*found, error);
  return error ? *found : canonical;
}

/// A stamp of a file that changes whenever the file is replaced or rewritten.
inline std::string file_stamp(const std::filesystem::path& path) {
  std::error_code error;
  const auto canonical = std::filesystem::canonical(path, error);
  if (error) return "missing:" + path.string();
  const auto size = std::filesystem::file_size(canonical, error);
  const auto time = std::filesystem::last_write_time(canonical, error);
  return canonical.string() + ":" + std::to_string(size) + ":" + std::to_string(time.time_since_epoch().count());
}

/// Local `#include "..."` and `#include <...>` targets of a source text.
inline std::vector<std::pair<std::string, bool>> includes_of(std::string_view text) {
  std::vector<std::pair<std::string, bool>> found;  // (target, quoted)
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const auto hash = line.find_first_not_of(" \t");
    if (hash == std::string_view::npos || line[hash] != '#') continue;
    line.remove_prefix(hash + 1);
    const auto word = line.find_first_not_of(" \t");
    if (word == std::string_view::npos || line.substr(word, 7) != "include") continue;
    line.remove_prefix(word + 7);
    const auto open = line.find_first_of("<\"");
    if (open == std::string_view::npos) continue;
    const char close = line[open] == '<' ? '>' : '"';
    const auto finish = line.find(close, open + 1);
    if (finish == std::string_view::npos) continue;
    found.emplace_back(std::string(line.substr(open + 1, finish - open - 1)), close == '"');
  }
  return found;
}

inline bool is_torch_include(std::string_view target) {
  for (std::string_view prefix : {"torch/", "ATen/", "c10/", "pybind11/", "caffe2/"})
    if (target.substr(0, prefix.size()) == prefix) return true;
  return false;
}

/// The torch and pybind11 headers `unit` includes, directly or through the candidate's
/// own headers.
inline std::set<std::string> torch_includes(const std::string& unit, const std::map<std::string, std::string>& files) {
  std::set<std::string> found;
  std::set<std::string> seen;
  std::vector<std::string> pending{unit};
  while (!pending.empty()) {
    const std::string current = pending.back();
    pending.pop_back();
    if (!seen.insert(current).second) continue;
    const auto file = files.find(current);
    if (file == files.end()) continue;
    const std::filesystem::path directory = std::filesystem::path(current).parent_path();
    for (const auto& [target, quoted] : includes_of(file->second)) {
      if (is_torch_include(target))
        found.insert(target);
      else if (quoted)
        pending.push_back((directory / target).lexically_normal().generic_string());
    }
  }
  return found;
}

/// Whether any of `includes` is, or starts with, one of `prefixes`.
inline bool includes_any_of(const std::set<std::string>& includes, const std::vector<std::string>& prefixes) {
  return std::any_of(includes.begin(), includes.end(), [&](const std::string& include) {
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& prefix) { return include.compare(0, prefix.size(), prefix) == 0; });
  });
}

/// The prerequisites listed in a make-style depfile.
inline std::vector<std::string> parse_depfile(std::string_view text) {
  std::vector<std::string> prerequisites;
  const auto colon = text.find(": ");
  if (colon == std::string_view::npos) return prerequisites;
  std::string current;
  for (std::size_t i = colon + 2; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      const char next = text[i + 1];
      if (next == '\n' || next == '\r') {
        ++i;
        if (next == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
        continue;
      }
      if (next == ' ' || next == '#' || next == '\\') {
        current += next;
        ++i;
        continue;
      }
    }
    if (c == '$' && i + 1 < text.size() && text[i + 1] == '$') {
      current += '$';
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (!current.empty()) prerequisites.push_back(std::move(current));
      current.clear();
      // A blank line ends the rule; phony targets for headers (-MP) follow.
      if (c == '\n' && i + 1 < text.size() && text[i + 1] == '\n') break;
      continue;
    }
    current += c;
  }
  if (!current.empty()) prerequisites.push_back(std::move(current));
  return prerequisites;
}

inline bool is_under(const std::filesystem::path& path, const std::filesystem::path& directory) {
  if (directory.empty()) return false;
  const std::string a = path.generic_string();
  std::string b = directory.generic_string();
  if (!b.empty() && b.back() != '/') b += '/';
  return a.rfind(b, 0) == 0;
}

/// One translation unit's outcome.
struct UnitOutcome {
  std::string file;
  bool succeeded = false;
  bool reused = false;
  bool timed_out = false;
  bool cacheable = true;
  std::string uncacheable_reason;
  std::string output;
  std::vector<Diagnostic> diagnostics;
  double seconds = 0;
  std::filesystem::path object;
  /// What the object is: its cache key, or for an object that cannot be cached, the
  /// SHA-256 of its bytes. The link is keyed on these.
  std::string key;
};

inline void hand_over(const std::filesystem::path& path, const std::optional<UserIdentity>& user) {
  if (!user || !running_as_root()) return;
  try {
    give_path_to(path, *user);
  } catch (const std::system_error& error) {
    throw CompileDriverError("cannot hand " + path.string() + " to uid " + std::to_string(user->uid) + ": " +
                             error.code().message());
  }
}

}  // namespace detail::compile

/// Builds candidates' kernels into `cuda_extension` modules. `build` may be called from
/// several threads at once (with different build directories, or the same one: builds
/// of one directory take turns) when `S::run` may be.
template <Sandbox S = AnySandbox>
class CompileDriver {
 public:
  explicit CompileDriver(S sandbox, CompileOptions options = {})
      : sandbox_(std::move(sandbox)), options_(std::move(options)), state_(std::make_unique<State>()) {
    if (options_.device != "cuda" && options_.device != "cpu")
      throw CompileDriverError("unknown device '" + options_.device + "': use \"cuda\" or \"cpu\"");
    if (options_.cache_directory.empty()) options_.cache_directory = default_compile_cache_directory();
    options_.cache_directory = std::filesystem::absolute(options_.cache_directory).lexically_normal();
    if (options_.jobs == 0)
      options_.jobs = std::clamp<std::size_t>(std::thread::hardware_concurrency(), std::size_t{1}, std::size_t{8});
  }

  [[nodiscard]] const CompileOptions& options() const noexcept { return options_; }
  [[nodiscard]] S& sandbox() noexcept { return sandbox_; }

  /// The probed toolchain (probed on first use, then cached in memory and on disk).
  /// Throws CompileDriverError when Python, torch or a compiler is unusable.
  const Toolchain& toolchain() {
    const std::lock_guard lock(state_->mutex);
    if (!state_->toolchain) state_->toolchain = probe_toolchain();
    return *state_->toolchain;
  }

  /// Probes the toolchain and builds the precompiled header of bindings now, so that the
  /// first candidate build does not pay for them. `with_frontend` builds the second one too.
  void prepare(bool with_frontend = false) {
    const Toolchain& tools = toolchain();
    if (!options_.precompiled_header) return;
    (void)precompiled_header(tools, HeaderTier::bindings, nullptr);
    if (with_frontend) (void)precompiled_header(tools, HeaderTier::frontend, nullptr);
  }

  /// The paths a sandbox must expose for builds into `build_directory`.
  [[nodiscard]] SandboxRequirements sandbox_requirements(const std::filesystem::path& build_directory) {
    const Toolchain& tools = toolchain();
    SandboxRequirements requirements;
    requirements.read_write.push_back(std::filesystem::absolute(build_directory).lexically_normal());
    requirements.read_only = {"/usr", tools.torch_directory, tools.python_include_directory,
                              options_.cache_directory / "pch"};
    if (options_.device == "cuda") requirements.read_only.push_back(tools.cuda_home);
    if (!tools.cudnn_library.empty()) requirements.read_only.push_back(tools.cudnn_library.parent_path());
    if (!tools.cudnn_include_directory.empty()) requirements.read_only.push_back(tools.cudnn_include_directory);
    return requirements;
  }

  /// Builds `candidate_directory/kernels/` into
  /// `build_directory/cuda_extension<EXT_SUFFIX>`. Reuses the objects of earlier builds
  /// (of any workspace) whose inputs are unchanged. The result says what happened;
  /// exceptions mean the driver could not work (CompileDriverError, SandboxError).
  [[nodiscard]] CompileResult build(const std::filesystem::path& candidate_directory,
                                    const std::filesystem::path& build_directory) {
    return build(candidate_directory, build_directory, options_.libraries);
  }

  /// As above, with the library policy of one task (`libraries`, typically the
  /// verifier's policy for the task within `options().libraries`) instead of the driver's.
  [[nodiscard]] CompileResult build(const std::filesystem::path& candidate_directory,
                                    const std::filesystem::path& build_directory, const LibraryPolicy& libraries) {
    const auto started = detail::compile::Clock::now();
    const Toolchain& tools = toolchain();
    const std::filesystem::path build = std::filesystem::absolute(build_directory).lexically_normal();
    std::filesystem::create_directories(build);

    CompileResult result;
    result.details["toolchain"] = tools;
    result.details["cache_directory"] = options_.cache_directory.string();
    detail::HeadTailBuffer log(options_.log_limit);

    auto finish = [&](bool succeeded) {
      result.succeeded = succeeded;
      result.log = log.text();
      result.duration = std::chrono::duration_cast<std::chrono::milliseconds>(detail::compile::Clock::now() - started);
      if (!succeeded) result.module_path.clear();
      return result;
    };
    auto fail = [&](std::string file, std::string message) {
      log.append("error: " + (file.empty() ? "" : file + ": ") + message + "\n");
      result.diagnostics.push_back({std::move(file), 0, 0, DiagnosticSeverity::error, std::move(message)});
      remove_module(build, tools);
      return finish(false);
    };

    auto build_lock = detail::FileLock::acquire(build / ".cuda_agent_build.lock", options_.timeout,
                                                [&] { report("waiting for another build of " + build.string()); });
    if (!build_lock) {
      result.timed_out = true;
      return fail("", "another build of " + build.string() + " held it for longer than the time limit");
    }

    // 1. Take the sources, never following links, and copy them into the build tree.
    CandidateSources sources;
    try {
      sources = read_candidate_sources(candidate_directory, options_.source_limits);
    } catch (const std::exception& error) {
      return fail(std::string(candidate_kernels_directory), error.what());
    }
    std::map<std::string, std::string> kernels;
    for (auto& [path, content] : sources.files)
      if (path != candidate_model_file) kernels.emplace(path, std::move(content));
    for (const auto& [path, reason] : sources.skipped) {
      result.diagnostics.push_back({path, 0, 0, DiagnosticSeverity::warning, "ignored: " + reason});
      log.append("warning: " + path + ": ignored: " + reason + "\n");
    }

    std::vector<std::string> units;
    for (const auto& [path, content] : kernels)
      if (is_cxx_translation_unit(path) || is_cuda_translation_unit(path)) units.push_back(path);
    if (units.empty())
      return fail(std::string(candidate_kernels_directory),
                  "no .cpp or .cu file under kernels/: the extension needs at least one C++ file with "
                  "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)");
    if (options_.device == "cpu") {
      bool has_cuda = false;
      for (const std::string& unit : units) {
        if (!is_cuda_translation_unit(unit)) continue;
        has_cuda = true;
        const std::string message = "device \"cpu\" builds C++ sources only; .cu files need device \"cuda\"";
        result.diagnostics.push_back({unit, 0, 0, DiagnosticSeverity::error, message});
        log.append("error: " + unit + ": " + message + "\n");
      }
      if (has_cuda) {
        remove_module(build, tools);
        return finish(false);
      }
    }

    const std::filesystem::path source_root = build / "src";
    const std::filesystem::path object_root = build / "obj";
    const std::filesystem::path temporary_root = build / "tmp";
    synchronize_snapshot(kernels, source_root);
    for (const auto& directory : {object_root, temporary_root}) {
      std::filesystem::create_directories(directory);
      detail::compile::hand_over(directory, options_.sandbox_user);
    }

    // 2. The precompiled headers the C++ files that include torch need. Their cost is the
    // toolchain's, not the candidate's: it does not count against the build's limit.
    std::vector<std::optional<HeaderTier>> tiers(units.size());
    for (std::size_t index = 0; index < units.size(); ++index) {
      if (!is_cxx_translation_unit(units[index])) continue;
      const std::set<std::string> included = detail::compile::torch_includes(units[index], kernels);
      if (included.empty()) continue;
      tiers[index] = detail::compile::includes_any_of(included, options_.precompiled_header_frontend_prefixes)
                         ? HeaderTier::frontend
                         : HeaderTier::bindings;
    }
    std::map<HeaderTier, std::filesystem::path> precompiled;
    if (options_.precompiled_header)
      for (const auto& tier : tiers)
        if (tier && !precompiled.contains(*tier))
          precompiled[*tier] = precompiled_header(tools, *tier, &result.details);

    // 3. Compile (or take from the cache) every translation unit, in parallel.
    const auto deadline = detail::compile::Clock::now() + options_.timeout;
    std::vector<detail::compile::UnitOutcome> outcomes(units.size());
    std::stop_source stop;
    std::atomic<std::size_t> next{0};
    std::vector<std::exception_ptr> errors(units.size());
    {
      std::vector<std::jthread> workers;
      const std::size_t count = std::min(options_.jobs, units.size());
      for (std::size_t w = 0; w < count; ++w) {
        workers.emplace_back([&] {
          for (std::size_t index = next++; index < units.size(); index = next++) {
            try {
              const auto header = tiers[index] ? precompiled.find(*tiers[index]) : precompiled.end();
              outcomes[index] =
                  compile_unit(tools, units[index], kernels, source_root, object_root,
                               header != precompiled.end() ? header->second : std::filesystem::path(), deadline, stop);
            } catch (...) {
              errors[index] = std::current_exception();
              stop.request_stop();
            }
            // A compile error does not stop the other files (the model wants all of its
            // errors at once); running out of time does.
            if (outcomes[index].timed_out) stop.request_stop();
          }
        });
      }
    }
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);

    nlohmann::json unit_details = nlohmann::json::array();
    bool all_compiled = true;
    for (auto& outcome : outcomes) {
      if (outcome.file.empty()) continue;  // never started: an earlier unit failed
      if (!outcome.output.empty()) {
        log.append("== " + outcome.file + (outcome.reused ? " (from the object cache)" : "") + "\n");
        log.append(outcome.output);
        if (outcome.output.back() != '\n') log.append("\n");
      }
      for (auto& diagnostic : outcome.diagnostics) result.diagnostics.push_back(diagnostic);
      (outcome.reused ? result.objects_reused : result.objects_compiled) += outcome.succeeded ? 1 : 0;
      result.timed_out = result.timed_out || outcome.timed_out;
      all_compiled = all_compiled && outcome.succeeded;
      nlohmann::json entry = {{"file", outcome.file},
                              {"reused", outcome.reused},
                              {"succeeded", outcome.succeeded},
                              {"seconds", outcome.seconds},
                              {"cacheable", outcome.cacheable}};
      if (!outcome.cacheable) entry["uncacheable_reason"] = outcome.uncacheable_reason;
      unit_details.push_back(std::move(entry));
    }
    result.details["units"] = std::move(unit_details);
    if (result.timed_out) {
      const std::string message =
          "the build took longer than its limit of " +
          detail::compile::format_seconds(std::chrono::duration<double>(options_.timeout).count()) + " and was stopped";
      return fail("", message);
    }
    if (!all_compiled || std::any_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.file.empty(); })) {
      remove_module(build, tools);
      if (std::none_of(result.diagnostics.begin(), result.diagnostics.end(),
                       [](const Diagnostic& d) { return d.severity == DiagnosticSeverity::error; }))
        return fail("", "compilation failed (see the log)");
      return finish(false);
    }

    // 4. Link (unless nothing changed), check the policy, and move the module in place.
    std::vector<std::pair<std::filesystem::path, std::string>> objects;
    objects.reserve(outcomes.size());
    for (const auto& outcome : outcomes) objects.emplace_back(outcome.object, outcome.key);
    std::sort(objects.begin(), objects.end());
    return link(tools, libraries, build, objects, deadline, stop, result, log, finish, fail);
  }

  /// Builds `candidate.source_directory` into `candidate.build_directory` (which must be
  /// set), for callers that carry a Candidate.
  [[nodiscard]] CompileResult build(const Candidate& candidate) {
    if (candidate.build_directory.empty())
      throw CompileDriverError("the candidate has no build directory to build into");
    return build(candidate.source_directory, candidate.build_directory);
  }

 private:
  struct State {
    std::mutex mutex;
    std::optional<Toolchain> toolchain;
    std::mutex progress_mutex;
  };

  void report(const std::string& line) {
    if (!options_.progress) return;
    const std::lock_guard lock(state_->progress_mutex);
    options_.progress(line);
  }

  // ---- toolchain ---------------------------------------------------------------

  Toolchain probe_toolchain() {
    Toolchain tools;
    tools.device = options_.device;
    const auto located = detail::locate_python(options_.python);
    if (!located)
      throw CompileDriverError("cannot find the Python interpreter '" +
                               detail::configured_python(options_.python).string() + "' on PATH");
    const std::filesystem::path& python = *located;
    tools.python = python;
    const nlohmann::json probe = probe_python(python);
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

    tools.cxx = detail::compile::resolve_program(options_.cxx, "the C++ compiler");
    const std::string cxx_version = compiler_identity({tools.cxx.string(), "--version"});
    tools.cxx_identity = cxx_version.substr(0, cxx_version.find('\n')) + " (" + tools.cxx.string() + ", " +
                         compiler_identity({tools.cxx.string(), "-dumpmachine"}) + ")";

    if (options_.device == "cuda") {
      tools.cuda_home = options_.cuda_home;
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
      tools.gpu_architecture = target_architecture(tools);
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

  /// Runs the probe script, or takes its earlier answer from the cache when neither the
  /// interpreter nor torch changed since.
  nlohmann::json probe_python(const std::filesystem::path& python) {
    const std::string identity = detail::compile::file_stamp(python);
    const std::filesystem::path cached =
        options_.cache_directory / "toolchains" / ("python-" + detail::sha256_hex(python.string()) + ".json");
    std::error_code missing;
    if (std::filesystem::exists(cached, missing)) {
      try {
        const nlohmann::json entry = nlohmann::json::parse(detail::read_file(cached));
        if (entry.value("python_stamp", "") == identity &&
            entry.value("torch_stamp", "") ==
                detail::compile::file_stamp(entry.at("probe").value("torch_version_file", "")))
          return entry.at("probe");
      } catch (const std::exception&) {
        // An unreadable entry is replaced below.
      }
    }
    report("probing " + python.string() + " for torch's headers and libraries");
    const auto script = embedded_resource("compile/probe_toolchain.py");
    if (!script) throw CompileDriverError("the embedded compile/probe_toolchain.py is missing from this build");
    const ProcessResult ran =
        detail::compile::run_trusted({python.string(), "-c", std::string(*script)}, std::chrono::minutes(5));
    if (!ran.succeeded())
      throw CompileDriverError("cannot query torch through " + python.string() + " (" + describe_exit(ran) +
                               "): " + ran.standard_error.text + ran.standard_output.text +
                               "\nSet CompileOptions::python or CUDA_AGENT_PYTHON to a Python with torch.");
    nlohmann::json probe = nlohmann::json::parse(ran.standard_output.text, nullptr, false);
    if (probe.is_discarded() || !probe.is_object())
      throw CompileDriverError("the toolchain probe printed no JSON: " + ran.standard_output.text);
    detail::write_file_atomically(
        cached, nlohmann::json{{"python_stamp", identity},
                               {"torch_stamp", detail::compile::file_stamp(probe.value("torch_version_file", ""))},
                               {"probe", probe}}
                    .dump(2));
    return probe;
  }

  static std::string compiler_identity(std::vector<std::string> argv) {
    const std::string program = argv.front();
    const ProcessResult ran = detail::compile::run_trusted(std::move(argv), std::chrono::seconds(60));
    if (!ran.succeeded())
      throw CompileDriverError("cannot run " + program + " (" + describe_exit(ran) + "): " + ran.standard_output.text +
                               ran.standard_error.text);
    std::string text = ran.standard_output.text;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    return text;
  }

  std::string target_architecture(const Toolchain& tools) {
    std::string architecture = options_.gpu_architecture;
    if (architecture.empty()) {
      const auto smi = find_program("nvidia-smi", Environment::inherit_all());
      if (!smi)
        throw CompileDriverError(
            "no GPU architecture to target: nvidia-smi is not available; set CompileOptions::gpu_architecture "
            "(for example \"sm_90a\")");
      const ProcessResult ran = detail::compile::run_trusted(
          {smi->string(), "--query-gpu=compute_cap", "--format=csv,noheader", "-i", std::to_string(options_.gpu_index)},
          std::chrono::seconds(60));
      std::string capability = ran.standard_output.text;
      capability.erase(std::remove_if(capability.begin(), capability.end(),
                                      [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }),
                       capability.end());
      if (!ran.succeeded() || capability.empty() || capability.find('.') == std::string::npos)
        throw CompileDriverError("cannot read the compute capability of GPU " + std::to_string(options_.gpu_index) +
                                 " from nvidia-smi (" + describe_exit(ran) + "): " + ran.standard_output.text +
                                 "; set CompileOptions::gpu_architecture");
      capability.erase(capability.find('.'), 1);
      architecture = "sm_" + capability;
      // The architecture-specific variant ("sm_90a") unlocks wgmma/TMA-class features;
      // the module only ever runs on this GPU, so take it where nvcc offers it.
      const ProcessResult codes =
          detail::compile::run_trusted({tools.nvcc.string(), "--list-gpu-code"}, std::chrono::seconds(60));
      if (codes.succeeded() && codes.standard_output.text.find(architecture + "a\n") != std::string::npos)
        architecture += "a";
      return architecture;
    }
    if (architecture.rfind("sm_", 0) != 0 && architecture.rfind("compute_", 0) != 0)
      architecture = "sm_" + architecture;
    std::string digits = architecture.substr(architecture.find('_') + 1);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    return "sm_" + digits;
  }

  // ---- flags -----------------------------------------------------------------------

  std::vector<std::string> common_definitions_and_includes(const Toolchain& tools) const {
    std::vector<std::string> flags = {"-DTORCH_EXTENSION_NAME=" + std::string(candidate_extension_name),
                                      "-DTORCH_API_INCLUDE_EXTENSION_H",
                                      std::string("-D_GLIBCXX_USE_CXX11_ABI=") + (tools.cxx11_abi ? "1" : "0")};
    for (const auto& directory : tools.torch_include_directories) {
      flags.push_back("-isystem");
      flags.push_back(directory.string());
    }
    flags.push_back("-isystem");
    flags.push_back(tools.python_include_directory.string());
    if (options_.device == "cuda") {
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

  std::vector<std::string> cxx_flags(const Toolchain& tools) const {
    std::vector<std::string> flags = {
        "-std=c++17", options_.device == "cuda" ? options_.cxx_optimization_cuda : options_.cxx_optimization_cpu,
        "-fPIC", "-fvisibility=hidden", "-pipe"};
    for (auto& flag : common_definitions_and_includes(tools)) flags.push_back(std::move(flag));
    flags.insert(flags.end(), options_.extra_cxx_flags.begin(), options_.extra_cxx_flags.end());
    return flags;
  }

  std::vector<std::string> cuda_flags(const Toolchain& tools) const {
    const std::string digits = tools.gpu_architecture.substr(tools.gpu_architecture.find('_') + 1);
    std::vector<std::string> flags = {"-std=c++17", "-O3", "-gencode=arch=compute_" + digits + ",code=sm_" + digits,
                                      "-lineinfo", "-ccbin", tools.cxx.string(), "-Xcompiler=-fPIC,-fvisibility=hidden",
                                      // torch's own defaults for CUDA sources, so that code
                                      // written for torch.utils.cpp_extension builds alike.
                                      "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                                      "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                                      "--expt-relaxed-constexpr"};
    for (auto& flag : common_definitions_and_includes(tools)) flags.push_back(std::move(flag));
    flags.insert(flags.end(), options_.extra_cuda_flags.begin(), options_.extra_cuda_flags.end());
    return flags;
  }

  std::vector<std::string> link_flags(const Toolchain& tools, const LibraryPolicy& libraries) const {
    const std::string torch_lib = tools.torch_library_directory.string();
    std::vector<std::string> flags = {"-shared", "-L" + torch_lib, "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"};
    if (options_.device == "cuda") {
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
    flags.insert(flags.end(), options_.extra_link_flags.begin(), options_.extra_link_flags.end());
    return flags;
  }

  /// What decides the content of the headers a file sees besides its flags (which carry
  /// the include paths and the compiler): the torch and Python versions, and the CUDA
  /// toolkit for device "cuda". Deliberately not the GPU architecture (only nvcc's flags
  /// name it), so that host objects and the precompiled header are shared across GPUs.
  static std::string header_content_key(const Toolchain& tools) {
    return detail::sha256_hex(tools.device + "\n" + tools.torch_version + "\n" + tools.torch_directory.string() + "\n" +
                              tools.python_version + "\n" + tools.python_include_directory.string() + "\n" +
                              tools.nvcc_identity);
  }

  /// Which precompiled header a file that includes torch gets.
  enum class HeaderTier { bindings, frontend };
  static const char* tier_name(HeaderTier tier) { return tier == HeaderTier::bindings ? "bindings" : "frontend"; }

  std::string precompiled_header_text(HeaderTier tier) const {
    std::string text = "// Generated by cuda_agent::CompileDriver: the torch and pybind11 headers, precompiled.\n";
    text += "#pragma once\n";
    const auto& includes = tier == HeaderTier::bindings ? options_.precompiled_header_includes
                                                        : options_.precompiled_header_frontend_includes;
    for (const auto& include : includes) text += "#include <" + include + ">\n";
    if (options_.device == "cuda")
      for (const auto& include : options_.precompiled_header_cuda_includes) text += "#include <" + include + ">\n";
    return text;
  }

  std::string precompiled_header_key(const Toolchain& tools, HeaderTier tier) const {
    detail::Sha256 hash;
    hash.update("cuda-agent pch v2\n").update(header_content_key(tools)).update(tools.cxx_identity).update("\n");
    hash.update(precompiled_header_text(tier));
    for (const auto& flag : cxx_flags(tools)) hash.update(flag).update(std::string_view("\0", 1));
    return hash.hex_digest();
  }

  /// The shared precompiled header of `tier` (built now if no process has built it yet),
  /// or an empty path when it cannot be built (then files compile without it, and
  /// `details["precompiled_headers"][tier]` says why).
  std::filesystem::path precompiled_header(const Toolchain& tools, HeaderTier tier, nlohmann::json* details) {
    const std::string key = precompiled_header_key(tools, tier);
    const std::filesystem::path directory = options_.cache_directory / "pch" / key;
    std::filesystem::path header = directory / "torch_extension_pch.h";
    const std::filesystem::path compiled = directory / "torch_extension_pch.h.gch";
    const std::filesystem::path complete = directory / "complete";
    auto note = [&](const nlohmann::json& value) {
      if (details) (*details)["precompiled_headers"][tier_name(tier)] = value;
    };
    std::error_code missing;
    if (std::filesystem::exists(complete, missing)) {
      note({{"path", compiled.string()}, {"built_now", false}});
      return header;
    }
    const auto started = detail::compile::Clock::now();
    auto lock = detail::FileLock::acquire(
        options_.cache_directory / "pch" / (key + ".lock"), options_.precompiled_header_timeout,
        [&] { report("waiting for another process to build the precompiled header"); });
    if (!lock) {
      note({{"error", "timed out waiting for another process building it"}});
      return {};
    }
    if (std::filesystem::exists(complete, missing)) {
      note({{"path", compiled.string()},
            {"built_now", false},
            {"waited_seconds", detail::compile::seconds_since(started)}});
      return header;
    }
    report(std::string("building the precompiled torch header for ") +
           (tier == HeaderTier::bindings ? "bindings" : "files that include torch's C++ frontend") +
           " (once per toolchain; this takes a while)");
    std::filesystem::create_directories(directory);
    detail::write_file_atomically(header, precompiled_header_text(tier));
    // Trusted input only (our header, torch's headers): built outside the sandbox,
    // straight into the shared cache.
    const std::filesystem::path partial = detail::temporary_sibling(compiled);
    std::vector<std::string> argv = {tools.cxx.string()};
    for (auto& flag : cxx_flags(tools)) argv.push_back(std::move(flag));
    for (const char* flag : {"-x", "c++-header"}) argv.emplace_back(flag);
    argv.push_back(header.string());
    argv.emplace_back("-o");
    argv.push_back(partial.string());
    const ProcessResult ran = detail::compile::run_trusted(argv, options_.precompiled_header_timeout);
    if (!ran.succeeded()) {
      std::error_code ignored;
      std::filesystem::remove(partial, ignored);
      note({{"error", "building it failed (" + describe_exit(ran) + "): " + ran.standard_output.text.substr(0, 4000) +
                          ran.standard_error.text.substr(0, 4000)}});
      return {};
    }
    std::filesystem::permissions(partial, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                              std::filesystem::perms::group_read | std::filesystem::perms::others_read);
    std::filesystem::rename(partial, compiled);
    detail::write_file_atomically(complete, key + "\n");
    note({{"path", compiled.string()}, {"built_now", true}, {"seconds", detail::compile::seconds_since(started)}});
    return header;
  }

  // ---- one translation unit -------------------------------------------------------

  std::string unit_base_key(const Toolchain& tools, const std::string& unit, const std::string& content,
                            const std::vector<std::string>& key_flags) const {
    detail::Sha256 hash;
    hash.update("cuda-agent object v2\n").update(header_content_key(tools)).update("\n");
    for (const auto& flag : key_flags) hash.update(flag).update(std::string_view("\0", 1));
    hash.update("\n").update(unit).update("\n").update(detail::sha256_hex(content));
    return hash.hex_digest();
  }

  static std::string unit_full_key(const std::string& base, const std::vector<std::string>& headers,
                                   const std::map<std::string, std::string>& files) {
    detail::Sha256 hash;
    hash.update(base);
    for (const std::string& header : headers) {
      const auto file = files.find(header);
      hash.update("\n").update(header).update("=").update(file == files.end() ? "missing"
                                                                              : detail::sha256_hex(file->second));
    }
    return hash.hex_digest();
  }

  std::filesystem::path object_in_cache(const std::string& key) const {
    return options_.cache_directory / "objects" / key.substr(0, 2) / (key + ".o");
  }
  std::filesystem::path manifest_directory(const std::string& base) const {
    return options_.cache_directory / "manifests" / base.substr(0, 2) / base;
  }

  /// A cached object for `base` whose recorded headers match the snapshot, if any.
  std::optional<std::string> find_cached(const std::string& base,
                                         const std::map<std::string, std::string>& files) const {
    std::error_code error;
    const std::filesystem::path directory = manifest_directory(base);
    if (!std::filesystem::is_directory(directory, error)) return std::nullopt;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      if (entry.path().extension() != ".json") continue;
      try {
        const nlohmann::json manifest = nlohmann::json::parse(detail::read_file(entry.path()));
        const auto headers = manifest.at("headers").get<std::vector<std::string>>();
        const std::string key = unit_full_key(base, headers, files);
        if (std::filesystem::exists(object_in_cache(key), error)) return key;
      } catch (const std::exception&) {
        // A damaged manifest is only a missed hit.
      }
    }
    return std::nullopt;
  }

  detail::compile::UnitOutcome compile_unit(const Toolchain& tools, const std::string& unit,
                                            const std::map<std::string, std::string>& files,
                                            const std::filesystem::path& source_root,
                                            const std::filesystem::path& object_root,
                                            const std::filesystem::path& precompiled,
                                            detail::compile::Clock::time_point deadline, std::stop_source& stop) {
    const auto started = detail::compile::Clock::now();
    detail::compile::UnitOutcome outcome;
    outcome.file = unit;
    const bool cuda = is_cuda_translation_unit(unit);
    std::vector<std::string> flags = cuda ? cuda_flags(tools) : cxx_flags(tools);
    std::vector<std::string> key_flags = flags;
    key_flags.insert(key_flags.begin(), cuda ? tools.nvcc_identity : tools.cxx_identity);
    if (!precompiled.empty()) {
      // The header's content is in its key; its location is not part of the object's.
      key_flags.push_back("pch:" + precompiled.parent_path().filename().string());
      flags.insert(flags.end(), {"-include", precompiled.string(), "-Winvalid-pch"});
    }
    const std::string base = unit_base_key(tools, unit, files.at(unit), key_flags);
    outcome.object = object_root / (unit + ".o");
    std::filesystem::create_directories(outcome.object.parent_path());

    if (const auto key = find_cached(base, files)) {
      outcome.key = *key;
      detail::copy_file_atomically(object_in_cache(*key), outcome.object);
      std::error_code missing;
      const std::filesystem::path cached_log = object_in_cache(*key).replace_extension(".log");
      if (std::filesystem::exists(cached_log, missing)) outcome.output = detail::read_file(cached_log);
      outcome.diagnostics = detail::parse_compiler_diagnostics(outcome.output, source_root.string() + "/", unit);
      outcome.succeeded = true;
      outcome.reused = true;
      outcome.seconds = detail::compile::seconds_since(started);
      report("reused " + unit + " from the object cache");
      return outcome;
    }

    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::compile::Clock::now());
    if (remaining.count() <= 0 || stop.stop_requested()) {
      outcome.file.clear();  // not started
      outcome.timed_out = remaining.count() <= 0;
      if (outcome.timed_out) outcome.file = unit;
      return outcome;
    }
    report("compiling " + unit);
    const std::filesystem::path depfile = object_root / (unit + ".d");
    const std::filesystem::path partial = object_root / (unit + ".o.partial");
    std::error_code ignored;
    std::filesystem::remove(depfile, ignored);
    std::filesystem::remove(partial, ignored);
    detail::compile::hand_over(outcome.object.parent_path(), options_.sandbox_user);

    Command command;
    command.argv.push_back(cuda ? tools.nvcc.string() : tools.cxx.string());
    command.argv.insert(command.argv.end(), flags.begin(), flags.end());
    for (const std::string& argument : {std::string("-MD"), std::string("-MF"), depfile.string(), std::string("-c"),
                                        unit, std::string("-o"), partial.string()})
      command.argv.push_back(argument);
    configure(command, tools, source_root, remaining, stop);
    const CommandResult ran = sandbox_.run(command);

    outcome.output = ran.standard_output.text;
    outcome.seconds = detail::compile::seconds_since(started);
    outcome.diagnostics = detail::parse_compiler_diagnostics(outcome.output, source_root.string() + "/", unit);
    if (ran.timed_out || ran.hit(LimitKind::wall_time)) {
      outcome.timed_out = true;
      return outcome;
    }
    if (ran.cancelled) {
      outcome.file.clear();  // stopped because another file ran out of time
      return outcome;
    }
    if (!ran.succeeded() || !std::filesystem::exists(partial, ignored)) {
      if (std::none_of(outcome.diagnostics.begin(), outcome.diagnostics.end(),
                       [](const Diagnostic& d) { return d.severity == DiagnosticSeverity::error; }))
        outcome.diagnostics.push_back({unit, 0, 0, DiagnosticSeverity::error,
                                       "the compiler failed (" + describe_exit(ran) + ") without a located message"});
      return outcome;
    }
    std::filesystem::rename(partial, outcome.object);
    outcome.succeeded = true;
    store_in_cache(base, unit, files, source_root, tools, depfile, outcome);
    if (outcome.key.empty()) outcome.key = "object:" + detail::sha256_hex(detail::read_file(outcome.object));
    return outcome;
  }

  void configure(Command& command, const Toolchain& tools, const std::filesystem::path& working_directory,
                 std::chrono::milliseconds timeout, std::stop_source& stop) const {
    const std::filesystem::path temporary = working_directory.parent_path() / "tmp";
    std::string path = "/usr/local/bin:/usr/bin:/bin";
    if (!tools.cuda_home.empty()) path = (tools.cuda_home / "bin").string() + ":" + path;
    command.environment.set("PATH", path);
    command.environment.set("LC_ALL", "C");
    command.environment.set("LANG", "C");
    command.environment.set("TMPDIR", temporary.string());
    command.environment.set("HOME", temporary.string());
    command.working_directory = working_directory;
    command.timeout = timeout;
    command.output_limit = options_.log_limit;
    command.merge_stderr = true;
    command.cancellation = stop.get_token();
  }

  /// Records the object under its full key: the source, the candidate headers the
  /// depfile names (with their content), and everything in `base`. A unit that reads
  /// files from outside the candidate and outside the toolchain is not cached, since
  /// its key could not cover them.
  void store_in_cache(const std::string& base, const std::string& unit, const std::map<std::string, std::string>& files,
                      const std::filesystem::path& source_root, const Toolchain& tools,
                      const std::filesystem::path& depfile, detail::compile::UnitOutcome& outcome) const {
    std::error_code error;
    if (!std::filesystem::exists(depfile, error)) {
      outcome.cacheable = false;
      outcome.uncacheable_reason = "the compiler wrote no dependency file";
      return;
    }
    std::set<std::string> headers;
    for (const std::string& prerequisite : detail::compile::parse_depfile(detail::read_file(depfile))) {
      std::filesystem::path path(prerequisite);
      if (path.is_relative()) path = source_root / path;
      path = path.lexically_normal();
      if (detail::compile::is_under(path, source_root)) {
        const std::string relative = path.lexically_relative(source_root).generic_string();
        if (relative != unit) headers.insert(relative);
        continue;
      }
      const bool toolchain_file = detail::compile::is_under(path, "/usr") ||
                                  detail::compile::is_under(path, tools.cuda_home) ||
                                  detail::compile::is_under(path, tools.torch_directory) ||
                                  detail::compile::is_under(path, tools.python_include_directory) ||
                                  detail::compile::is_under(path, tools.cudnn_include_directory) ||
                                  detail::compile::is_under(path, options_.cache_directory);
      if (!toolchain_file) {
        outcome.cacheable = false;
        outcome.uncacheable_reason = "includes " + path.string() + ", outside the candidate and the toolchain";
        return;
      }
    }
    const std::vector<std::string> header_list(headers.begin(), headers.end());
    for (const std::string& header : header_list) {
      if (!files.count(header)) {
        outcome.cacheable = false;
        outcome.uncacheable_reason = "includes " + header + ", which is not a candidate source file";
        return;
      }
    }
    const std::string key = unit_full_key(base, header_list, files);
    outcome.key = key;
    detail::copy_file_atomically(outcome.object, object_in_cache(key));
    detail::write_file_atomically(std::filesystem::path(object_in_cache(key)).replace_extension(".log"),
                                  outcome.output);
    const std::string variant = detail::sha256_hex(detail::compile::join(header_list, "\n"));
    detail::write_file_atomically(manifest_directory(base) / (variant + ".json"),
                                  nlohmann::json{{"unit", unit}, {"headers", header_list}}.dump());
  }

  // ---- the build tree --------------------------------------------------------------

  /// Makes `root` hold exactly `files`, rewriting only what changed.
  static void synchronize_snapshot(const std::map<std::string, std::string>& files, const std::filesystem::path& root) {
    std::error_code error;
    std::filesystem::create_directories(root);
    std::vector<std::filesystem::path> stale;
    for (auto entry = std::filesystem::recursive_directory_iterator(root, error);
         !error && entry != std::filesystem::recursive_directory_iterator(); entry.increment(error)) {
      if (entry->is_directory(error)) continue;
      const std::string relative = entry->path().lexically_relative(root).generic_string();
      if (!files.count(relative)) stale.push_back(entry->path());
    }
    for (const auto& path : stale) std::filesystem::remove(path, error);
    for (const auto& [relative, content] : files) {
      const std::filesystem::path target = root / relative;
      if (std::filesystem::exists(target, error)) {
        try {
          if (detail::read_file(target) == content) continue;
        } catch (const std::exception&) {
          // unreadable: rewrite it
        }
      }
      detail::write_file_atomically(target, content);
    }
  }

  std::filesystem::path module_path(const std::filesystem::path& build, const Toolchain& tools) const {
    return build / (std::string(candidate_extension_name) + tools.extension_suffix);
  }

  void remove_module(const std::filesystem::path& build, const Toolchain& tools) const {
    std::error_code ignored;
    std::filesystem::remove(module_path(build, tools), ignored);
    std::filesystem::remove(build / ".cuda_agent_link.json", ignored);
  }

  template <class Finish, class Fail>
  CompileResult link(const Toolchain& tools, const LibraryPolicy& libraries, const std::filesystem::path& build,
                     const std::vector<std::pair<std::filesystem::path, std::string>>& objects,
                     detail::compile::Clock::time_point deadline, std::stop_source& stop, CompileResult& result,
                     detail::HeadTailBuffer& log, Finish& finish, Fail& fail) {
    const auto started = detail::compile::Clock::now();
    const std::vector<std::string> flags = link_flags(tools, libraries);
    detail::Sha256 hash;
    hash.update("cuda-agent link v2\n").update(tools.key).update(detail::compile::join(flags, "\n"));
    nlohmann::json policy = libraries;
    hash.update(policy.dump());
    for (const auto& [object, key] : objects) hash.update("\n").update(object.string()).update("=").update(key);
    const std::string link_key = hash.hex_digest();

    const std::filesystem::path module = module_path(build, tools);
    const std::filesystem::path state = build / ".cuda_agent_link.json";
    std::error_code error;
    if (std::filesystem::exists(module, error) && std::filesystem::exists(state, error)) {
      try {
        const nlohmann::json recorded = nlohmann::json::parse(detail::read_file(state));
        if (recorded.value("link_key", "") == link_key &&
            recorded.value("module_stamp", "") == detail::compile::file_stamp(module)) {
          result.module_path = module;
          result.details["link"] = {{"skipped", true}, {"reason", "no object changed"}};
          return finish(true);
        }
      } catch (const std::exception&) {
        // relink below
      }
    }

    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::compile::Clock::now());
    if (remaining.count() <= 0) {
      result.timed_out = true;
      return fail("", "the build ran out of time before linking");
    }
    report("linking " + module.filename().string());
    const std::filesystem::path partial = build / "obj" / (module.filename().string() + ".partial");
    std::filesystem::remove(partial, error);
    Command command;
    command.argv.push_back(tools.cxx.string());
    command.argv.emplace_back("-o");
    command.argv.push_back(partial.string());
    for (const auto& object : objects) command.argv.push_back(object.first.string());
    command.argv.insert(command.argv.end(), flags.begin(), flags.end());
    configure(command, tools, build / "src", remaining, stop);
    const CommandResult ran = sandbox_.run(command);
    if (!ran.standard_output.text.empty()) log.append("== link\n" + ran.standard_output.text + "\n");
    for (auto& diagnostic :
         detail::parse_compiler_diagnostics(ran.standard_output.text, (build / "src").string() + "/"))
      result.diagnostics.push_back(std::move(diagnostic));
    if (ran.timed_out) {
      result.timed_out = true;
      return fail("", "linking was stopped after " +
                          detail::compile::format_seconds(detail::compile::seconds_since(started)) +
                          ": the build ran past its limit of " +
                          detail::compile::format_seconds(std::chrono::duration<double>(options_.timeout).count()));
    }
    if (!ran.succeeded() || !std::filesystem::exists(partial, error)) {
      if (std::none_of(result.diagnostics.begin(), result.diagnostics.end(),
                       [](const Diagnostic& d) { return d.severity == DiagnosticSeverity::error; }))
        return fail("", "linking failed (" + describe_exit(ran) + "); see the log");
      remove_module(build, tools);
      return finish(false);
    }

    // The module is checked before anyone can import it.
    const std::string image = detail::read_file(partial);
    const auto symbols = detail::read_dynamic_symbols(image);
    if (!symbols) return fail("", "the linker produced something that is not a 64-bit ELF shared object");
    const std::string entry_point = "PyInit_" + std::string(candidate_extension_name);
    if (std::find(symbols->defined.begin(), symbols->defined.end(), entry_point) == symbols->defined.end()) {
      std::filesystem::remove(partial, error);
      return fail(
          std::string(candidate_kernels_directory),
          "the extension defines no Python module: add PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(...); } "
          "to one C++ file under kernels/");
    }
    std::vector<std::string> violations;
    for (const std::string& symbol : symbols->undefined)
      if (std::string why = detail::library_policy_violation(symbol, libraries); !why.empty())
        violations.push_back(std::move(why));
    if (!violations.empty()) {
      std::filesystem::remove(partial, error);
      result.details["library_policy_violations"] = violations;
      for (std::size_t i = 1; i < violations.size(); ++i)
        result.diagnostics.push_back({std::string(candidate_kernels_directory), 0, 0, DiagnosticSeverity::error,
                                      "the extension " + violations[i]});
      return fail(std::string(candidate_kernels_directory), "the extension " + violations[0]);
    }
    std::filesystem::rename(partial, module);
    detail::write_file_atomically(
        state, nlohmann::json{{"link_key", link_key}, {"module_stamp", detail::compile::file_stamp(module)}}.dump());
    result.module_path = module;
    result.details["link"] = {{"skipped", false}, {"seconds", detail::compile::seconds_since(started)}};
    return finish(true);
  }

  S sandbox_;
  CompileOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace cuda_agent
