// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Compile` task tool: builds the workspace's `kernels/` into the `cuda_extension`
/// module with the compile driver and tells the model what the compilers said, located
/// and capped. It only informs the model; rewards come from the trusted evaluation, which
/// rebuilds the candidate's sources elsewhere.

#include <cstddef>      // size_t
#include <filesystem>   // path, copy_file
#include <memory>       // shared_ptr
#include <stdexcept>    // invalid_argument
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move

#include <nlohmann/json.hpp>

#include "cuda_agent/compile/compile_driver.hpp"
#include "cuda_agent/tool.hpp"

namespace cuda_agent {

struct CompileToolOptions {
  /// Where the driver builds. It should lie outside the workspace: the build tree feeds
  /// the shared object cache, so nothing the agent runs should be able to write it.
  std::filesystem::path build_directory;
  /// Also copy the built module into this folder of the workspace (relative to it), for
  /// the model's own experiments; empty: do not.
  std::filesystem::path publish_directory = "build";
  /// At most this many diagnostics are listed (errors first).
  std::size_t max_diagnostics = 30;
  /// Bytes of raw compiler output shown when the model asks for the log.
  std::size_t max_log_bytes = 12 * 1024;
};

/// Formats a build for a model: the outcome in one line, then the located diagnostics
/// ("kernels/relu.cu:12:5: error: ..."), errors first, capped.
[[nodiscard]] inline std::string describe_compile_result(const CompileResult& result,
                                                         std::size_t max_diagnostics = 30) {
  std::size_t errors = 0;
  std::size_t warnings = 0;
  for (const Diagnostic& diagnostic : result.diagnostics) {
    errors += diagnostic.severity == DiagnosticSeverity::error;
    warnings += diagnostic.severity == DiagnosticSeverity::warning;
  }
  const std::string seconds = std::to_string(static_cast<double>(result.duration.count()) / 1000.0).substr(0, 4) + " s";
  auto plural = [](std::size_t count, std::string_view word) {
    return std::to_string(count) + " " + std::string(word) + (count == 1 ? "" : "s");
  };
  std::string text;
  if (result.succeeded) {
    text = "Build succeeded in " + seconds + ": " + plural(result.objects_compiled, "file") + " compiled, " +
           std::to_string(result.objects_reused) + " reused from the cache" +
           (warnings ? ", " + plural(warnings, "warning") : std::string()) + ".\n";
  } else if (result.timed_out) {
    text = "Build stopped: it ran past its time limit (" + seconds + ").\n";
  } else {
    text = "Build failed in " + seconds + " with " + plural(errors, "error") +
           (warnings ? " and " + plural(warnings, "warning") : std::string()) + ".\n";
  }

  std::size_t shown = 0;
  for (const DiagnosticSeverity severity :
       {DiagnosticSeverity::error, DiagnosticSeverity::warning, DiagnosticSeverity::note}) {
    for (const Diagnostic& diagnostic : result.diagnostics) {
      if (diagnostic.severity != severity) continue;
      if (shown == max_diagnostics) break;
      ++shown;
      std::string location = diagnostic.file.empty() ? std::string("(build)") : diagnostic.file;
      if (diagnostic.line > 0) location += ":" + std::to_string(diagnostic.line);
      if (diagnostic.column > 0) location += ":" + std::to_string(diagnostic.column);
      static constexpr std::string_view names[] = {"error", "warning", "note"};
      std::string message = diagnostic.message;
      if (message.size() > 600) message = message.substr(0, 600) + " [...]";
      text += location + ": " + std::string(names[static_cast<int>(severity)]) + ": " + message + "\n";
    }
  }
  if (shown < result.diagnostics.size())
    text += "(" + std::to_string(result.diagnostics.size() - shown) + " more diagnostics not shown.)\n";
  if (!result.succeeded && errors == 0 && !result.log.empty())
    text += "No located error; the end of the compiler output:\n" +
            result.log.substr(result.log.size() > 3000 ? result.log.size() - 3000 : 0) + "\n";
  return text;
}

/// The `Compile` tool. Shares its driver (and so its caches) with whoever else builds.
template <Sandbox S = AnySandbox>
class CompileTool {
 public:
  CompileTool(std::shared_ptr<CompileDriver<S>> driver, CompileToolOptions options)
      : driver_(std::move(driver)), options_(std::move(options)) {
    if (!driver_) throw std::invalid_argument("CompileTool needs a compile driver");
    if (options_.build_directory.empty()) throw std::invalid_argument("CompileTool needs a build directory");
  }

  [[nodiscard]] std::string_view name() const { return "Compile"; }

  [[nodiscard]] std::string_view description() const {
    return "Builds the CUDA/C++ sources under kernels/ into the Python extension module `cuda_extension` "
           "(the one model_new.py imports), incrementally: only files that changed are recompiled. Returns "
           "compiler errors and warnings with file, line and column. Run it after every change to kernels/. "
           "It only builds; use Verify for correctness and Profile for speed.";
  }

  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"},
            {"properties",
             {{"log",
               {{"type", "boolean"},
                {"description", "Also return the end of the compilers' raw output (default false)."}}}}},
            {"additionalProperties", false}};
  }

  ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    const bool with_log = arguments.is_object() && arguments.value("log", false);
    CompileResult result;
    try {
      result = driver_->build(context.workspace(), options_.build_directory);
    } catch (const std::exception& error) {
      return ToolResult::error(std::string("The build environment failed (not your code): ") + error.what(),
                               {{"environment_error", true}});
    }
    std::string text = describe_compile_result(result, options_.max_diagnostics);
    if (result.succeeded && !options_.publish_directory.empty()) {
      const std::filesystem::path folder = context.workspace() / options_.publish_directory;
      std::error_code error;
      std::filesystem::create_directories(folder, error);
      if (!error) detail::copy_file_atomically(result.module_path, folder / result.module_path.filename());
      if (!error)
        text += "Module: " + (options_.publish_directory / result.module_path.filename()).generic_string() + "\n";
    }
    if (with_log) {
      const std::string& log = result.log;
      text += "\nCompiler output" +
              std::string(log.size() > options_.max_log_bytes
                              ? " (last " + std::to_string(options_.max_log_bytes) + " bytes)"
                              : "") +
              ":\n" + log.substr(log.size() > options_.max_log_bytes ? log.size() - options_.max_log_bytes : 0);
    }
    nlohmann::json metadata = result;
    metadata.erase("log");
    return result.succeeded ? ToolResult::success(std::move(text), std::move(metadata))
                            : ToolResult::error(std::move(text), std::move(metadata));
  }

 private:
  std::shared_ptr<CompileDriver<S>> driver_;
  CompileToolOptions options_;
};

}  // namespace cuda_agent
