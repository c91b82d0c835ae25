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
///
/// This header holds the driver: the build's steps in order, the sandboxed compiles and
/// the link. What it is configured with is in compile_options.hpp, what it probes in
/// toolchain.hpp; the parts users never name are in detail/: the probe
/// (toolchain_probe.hpp), the flags (compile_flags.hpp), the precompiled headers
/// (precompiled_header.hpp), the object cache (object_cache.hpp), the units and their
/// includes (build_graph.hpp), and what these share (build_support.hpp).

#include <algorithm>     // sort, find, any_of, none_of, min, clamp
#include <atomic>        // atomic
#include <chrono>        // milliseconds, duration
#include <cstddef>       // size_t
#include <exception>     // exception, exception_ptr, current_exception, rethrow_exception
#include <filesystem>    // path, create_directories, ...
#include <map>           // map
#include <memory>        // unique_ptr, make_unique
#include <mutex>         // mutex, lock_guard
#include <optional>      // optional
#include <set>           // set
#include <stop_token>    // stop_source
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <thread>        // jthread, hardware_concurrency
#include <utility>       // move, pair
#include <vector>        // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/compile/compile_options.hpp"
#include "cuda_agent/compile/detail/build_graph.hpp"
#include "cuda_agent/compile/detail/build_support.hpp"
#include "cuda_agent/compile/detail/compile_flags.hpp"
#include "cuda_agent/compile/detail/compiler_diagnostics.hpp"
#include "cuda_agent/compile/detail/elf_symbols.hpp"
#include "cuda_agent/compile/detail/object_cache.hpp"
#include "cuda_agent/compile/detail/precompiled_header.hpp"
#include "cuda_agent/compile/detail/toolchain_probe.hpp"
#include "cuda_agent/compile/toolchain.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/head_tail_buffer.hpp"
#include "cuda_agent/detail/sha256.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"

namespace cuda_agent {

/// The mount that shows the precompiled headers of compile cache `cache_directory` inside a
/// build sandbox. Builds include them by their host path, and a cache under a path the
/// sandbox hides (its private /tmp, say) is otherwise out of sight there. Creates the folder,
/// so that the mount has a source before the first header is built.
[[nodiscard]] inline Mount precompiled_header_mount(const std::filesystem::path& cache_directory) {
  const std::filesystem::path headers = std::filesystem::absolute(cache_directory).lexically_normal() / "pch";
  std::filesystem::create_directories(headers);
  return Mount{headers, headers, Mount::Access::read_only, false};
}

/// What a sandbox must let the compile commands reach, at the same paths.
struct SandboxRequirements {
  std::vector<std::filesystem::path> read_only;
  std::vector<std::filesystem::path> read_write;
};

/// Located diagnostics in g++/nvcc/ld output (see detail/compiler_diagnostics.hpp).
[[nodiscard]] inline std::vector<Diagnostic> parse_compiler_diagnostics(std::string_view output,
                                                                        std::string_view source_root = {},
                                                                        std::string_view unit = {}) {
  return detail::parse_compiler_diagnostics(output, source_root, unit);
}

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
    if (!state_->toolchain) state_->toolchain = detail::compile::probe_toolchain(options_, reporter());
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

  // The pieces outside the class report through this, so that their lines take turns
  // with the driver's.
  detail::compile::ReportProgress reporter() {
    return [this](const std::string& line) { report(line); };
  }

  using HeaderTier = detail::compile::HeaderTier;

  std::filesystem::path precompiled_header(const Toolchain& tools, HeaderTier tier, nlohmann::json* details) {
    return detail::compile::precompiled_header(options_, tools, tier, details, reporter());
  }

  // ---- one translation unit -------------------------------------------------------

  detail::compile::UnitOutcome compile_unit(const Toolchain& tools, const std::string& unit,
                                            const std::map<std::string, std::string>& files,
                                            const std::filesystem::path& source_root,
                                            const std::filesystem::path& object_root,
                                            const std::filesystem::path& precompiled,
                                            detail::compile::Clock::time_point deadline, std::stop_source& stop) {
    const auto started = detail::compile::Clock::now();
    detail::compile::UnitOutcome outcome;
    outcome.file = unit;
    const detail::compile::ObjectCache cache(options_.cache_directory);
    const bool cuda = is_cuda_translation_unit(unit);
    std::vector<std::string> flags =
        cuda ? detail::compile::cuda_flags(options_, tools) : detail::compile::cxx_flags(options_, tools);
    std::vector<std::string> key_flags = flags;
    key_flags.insert(key_flags.begin(), cuda ? tools.nvcc_identity : tools.cxx_identity);
    if (!precompiled.empty()) {
      // The header's content is in its key; its location is not part of the object's.
      key_flags.push_back("pch:" + precompiled.parent_path().filename().string());
      flags.insert(flags.end(), {"-include", precompiled.string(), "-Winvalid-pch"});
    }
    const std::string base = cache.unit_base_key(tools, unit, files.at(unit), key_flags);
    outcome.object = object_root / (unit + ".o");
    std::filesystem::create_directories(outcome.object.parent_path());

    if (const auto key = cache.find_cached(base, files)) {
      outcome.key = *key;
      detail::copy_file_atomically(cache.object_in_cache(*key), outcome.object);
      std::error_code missing;
      const std::filesystem::path cached_log = cache.object_in_cache(*key).replace_extension(".log");
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
    cache.store_in_cache(base, unit, files, source_root, tools, depfile, outcome);
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
    const std::vector<std::string> flags = detail::compile::link_flags(options_, tools, libraries);
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
