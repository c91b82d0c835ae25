// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// KernelBench generations as candidates. The field's common form of a solution is one
/// `model_new.py` that builds its kernels with `torch.utils.cpp_extension.load_inline`
/// (or `load` with source files beside it). `convert_kernelbench_generation` turns such a
/// file into the workspace layout (`model_new.py` importing `cuda_extension`, the sources
/// under `kernels/`) without running it: the harness's `generation.py` reads the file's
/// syntax tree in a sandboxed interpreter, lays the sources out as `load_inline` would, and
/// puts the built module where the call was. The candidate then goes through the trusted
/// evaluation like any other: static checks, the compile driver's build, verification and
/// timing. Sources that only running the file would produce are refused
/// (`RejectionReason::unresolved_sources`), as is a file that is not Python (`load_error`).
///
/// ```
/// AnySandbox sandbox = make_default_sandbox(options);
/// GenerationConversion converted = convert_kernelbench_generation(sandbox, "level_1_problem_19_sample_0_kernel.py");
/// if (converted.rejection) report(*converted.rejection);
/// else write_candidate_sources(converted.candidate.files, candidate_directory);
/// ```

#include <chrono>       // milliseconds, seconds
#include <filesystem>   // path
#include <map>          // map
#include <optional>     // optional
#include <stdexcept>    // runtime_error
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/sandbox.hpp"

namespace cuda_agent {

/// A KernelBench generation laid out as a candidate, or why it cannot be.
struct GenerationConversion {
  /// `model_new.py` and `kernels/...`; empty when `rejection` is set.
  CandidateSources candidate;
  /// What the conversion did not carry over (the build flags, which every candidate is
  /// built without), for the report.
  std::vector<std::string> notes;
  /// "load_inline" or "load", and the call's line in the generation.
  std::string build_function;
  int build_line = 0;
  /// Set when the file cannot become a candidate: the sample's failure, with its reason.
  std::optional<Rejection> rejection;
};

struct GenerationConversionOptions {
  /// The interpreter that reads the file (the standard library is all it needs).
  std::filesystem::path python = "python3";
  std::chrono::milliseconds timeout{30'000};
  /// Largest generation, and largest source file a `load` call names.
  std::size_t max_file_bytes = std::size_t{1} << 20;
};

/// The evaluation of a generation that could not be laid out: nothing built, its rejection
/// as the verdict (so that a reward policy scores it as any rejected candidate).
[[nodiscard]] inline Evaluation refused_evaluation(const GenerationConversion& conversion) {
  Evaluation evaluation;
  evaluation.compile.log = "not built: the generation cannot be laid out as a candidate";
  evaluation.verification.emplace();
  evaluation.verification->rejection = conversion.rejection;
  return evaluation;
}

/// How the generation was laid out, for a result document.
[[nodiscard]] inline nlohmann::json describe_conversion(const GenerationConversion& conversion) {
  return {{"build_function", conversion.build_function},
          {"build_line", conversion.build_line},
          {"notes", conversion.notes}};
}

namespace detail {

/// The generation's failure as a candidate's rejection.
[[nodiscard]] inline GenerationConversion refused_generation(RejectionReason reason, std::string message,
                                                             nlohmann::json details = nlohmann::json::object()) {
  GenerationConversion conversion;
  conversion.rejection = Rejection{reason, std::move(message), std::move(details)};
  return conversion;
}

/// A `load` source path, relative to the generation's folder, that stays inside it.
[[nodiscard]] inline bool stays_in_folder(const std::string& relative) {
  const std::filesystem::path normal = std::filesystem::path(relative).lexically_normal();
  return !normal.empty() && !normal.is_absolute() && *normal.begin() != "..";
}

}  // namespace detail

/// Lays out the generation at `file` as a candidate. The file is read in `sandbox` by
/// `options.python` and never imported; the source files a `load` call names are read from
/// the generation's folder (never through a symbolic link, never outside the folder).
/// Failures of the generation come back as `rejection`; failures of the host (the
/// interpreter does not start, the sandbox fails) throw std::runtime_error.
template <Sandbox S>
[[nodiscard]] GenerationConversion convert_kernelbench_generation(S& sandbox, const std::filesystem::path& file,
                                                                  const GenerationConversionOptions& options = {}) {
  const std::optional<std::string> source =
      detail::read_regular_file_without_following_links(file, options.max_file_bytes);
  if (!source)
    return detail::refused_generation(RejectionReason::load_error,
                                      file.filename().string() + " is not a readable regular file of at most " +
                                          std::to_string(options.max_file_bytes) + " bytes");
  const std::optional<std::string_view> script = embedded_resource("harness/cuda_agent_harness/generation.py");
  if (!script) throw std::runtime_error("the harness's generation.py is not embedded in this build");

  Command command;
  // -I -S: no site packages, no environment, no current directory on the path: the script
  // needs the standard library only.
  command.argv = {options.python.string(), "-I", "-S", "-c", std::string(*script)};
  command.stdin_data =
      nlohmann::json{{"source", *source}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  command.timeout = options.timeout;
  command.merge_stderr = false;
  command.output_limit = 4 * options.max_file_bytes + (std::size_t{64} << 10);
  const CommandResult result = sandbox.run(command);
  if (!result.succeeded() || result.standard_output.truncated())
    throw std::runtime_error(
        "reading the generation " + file.filename().string() + " failed (" +
        (result.timed_out ? std::string("timed out") : "exit " + std::to_string(result.exit_code.value_or(-1))) +
        "): " + result.standard_error.text);
  const nlohmann::json reply = nlohmann::json::parse(result.standard_output.text);

  if (!reply.value("ok", false)) {
    const std::string reason_name = reply.value("reason", std::string("unresolved_sources"));
    return detail::refused_generation(parse_rejection_reason(reason_name).value_or(RejectionReason::unresolved_sources),
                                      reply.value("message", std::string()),
                                      {{"file", file.filename().string()}, {"line", reply.value("line", 0)}});
  }
  GenerationConversion conversion;
  conversion.build_function = reply["build"].value("function", std::string());
  conversion.build_line = reply["build"].value("line", 0);
  conversion.notes = reply.value("notes", std::vector<std::string>());
  conversion.candidate.files = reply.at("files").get<std::map<std::string, std::string>>();
  for (const std::string& relative : reply.value("source_files", std::vector<std::string>())) {
    const std::string name = std::filesystem::path(relative).filename().string();
    const std::string target = std::string(candidate_kernels_directory) + "/" + name;
    if (!detail::stays_in_folder(relative))
      return detail::refused_generation(RejectionReason::unresolved_sources,
                                        "load names " + relative + ", outside the generation's folder");
    if (!is_candidate_source_path(target))
      return detail::refused_generation(RejectionReason::unresolved_sources,
                                        "load names " + relative + ", which is not a C++ or CUDA source");
    if (conversion.candidate.files.contains(target))
      return detail::refused_generation(RejectionReason::unresolved_sources, "load names two sources called " + name);
    std::optional<std::string> text = detail::read_regular_file_without_following_links(
        file.parent_path() / std::filesystem::path(relative).lexically_normal(), options.max_file_bytes);
    if (!text)
      return detail::refused_generation(
          RejectionReason::unresolved_sources,
          "load names " + relative + ", which is not a readable file beside the generation");
    conversion.candidate.files.emplace(target, std::move(*text));
  }
  return conversion;
}

}  // namespace cuda_agent
