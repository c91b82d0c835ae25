// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The Bash tool (Claude Code's contract): `command`, `timeout` (milliseconds, default
/// 120000, at most 600000), `description`. Each call runs one `bash -c` in a `Sandbox`;
/// the working directory carries over between calls of an episode through
/// `ToolContext`. Output (stdout and stderr interleaved) is cut in the middle above
/// 30000 bytes with the omitted amount stated; empty output, failures and timeouts are
/// said in words.

#include <algorithm>    // max, min
#include <chrono>       // milliseconds
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <cstdio>       // snprintf
#include <filesystem>   // path
#include <optional>     // optional
#include <random>       // random_device
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move

#include <nlohmann/json.hpp>

#include "cuda_agent/process.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/tool_support.hpp"

namespace cuda_agent {

/// Variables that keep programs from waiting for a terminal or filling the output with
/// progress bars and colour codes.
[[nodiscard]] inline Environment non_interactive_environment() {
  Environment environment;
  environment.set("PAGER", "cat")
      .set("GIT_PAGER", "cat")
      .set("MANPAGER", "cat")
      .set("SYSTEMD_PAGER", "cat")
      .set("LESS", "-FRX")
      .set("GIT_EDITOR", "true")
      .set("EDITOR", "true")
      .set("VISUAL", "true")
      .set("GIT_TERMINAL_PROMPT", "0")
      .set("DEBIAN_FRONTEND", "noninteractive")
      .set("TERM", "dumb")
      .set("NO_COLOR", "1")
      .set("CLICOLOR", "0")
      .set("PIP_PROGRESS_BAR", "off")
      .set("PIP_NO_INPUT", "1")
      .set("PIP_DISABLE_PIP_VERSION_CHECK", "1")
      .set("TQDM_DISABLE", "1")
      .set("HF_HUB_DISABLE_PROGRESS_BARS", "1")
      .set("PYTHONUNBUFFERED", "1")
      .set("CMAKE_COLOR_DIAGNOSTICS", "OFF");
  return environment;
}

struct BashOptions {
  std::chrono::milliseconds default_timeout{120'000};
  std::chrono::milliseconds max_timeout{600'000};
  /// Output above this is cut in the middle.
  std::size_t max_output_bytes = 30'000;
  std::string shell = "/bin/bash";
  /// Added to non_interactive_environment() (and overriding it) for every command.
  Environment environment;
  ResourceLimits limits;
};

namespace detail {

/// Runs the model's command with `eval` (so that a syntax error is an ordinary failure)
/// and, on any exit, prints an unguessable marker followed by the working directory, which
/// the tool strips from the output and keeps for the next call.
inline constexpr std::string_view bash_wrapper_script =
    "trap \"__cuda_agent_status=\\$?; printf '\\n%s%s\\n' '$3' \\\"\\$PWD\\\"; exit \\$__cuda_agent_status\" EXIT\n"
    "__cuda_agent_command=$1\n"
    "cd -- \"$2\" 2>/dev/null || printf 'Note: the working directory %s no longer exists; running in %s.\\n' \"$2\" "
    "\"$PWD\"\n"
    "set --\n"
    "eval \"$__cuda_agent_command\"\n";

inline std::string random_marker() {
  std::random_device random;
  char text[64];
  std::snprintf(text, sizeof text, "__cuda_agent_cwd_%08x%08x%08x%08x__", random(), random(), random(), random());
  return text;
}

inline bool lexically_inside(const std::filesystem::path& path, const std::filesystem::path& root) {
  const std::string relative = path.lexically_normal().lexically_relative(root).generic_string();
  return !relative.empty() && relative != ".." && !relative.starts_with("../");
}

}  // namespace detail

/// Runs shell commands for the model in a sandbox. Holds a reference to the sandbox,
/// which must outlive the tool.
template <Sandbox S>
class BashTool {
 public:
  explicit BashTool(S& sandbox, BashOptions options = {}) : sandbox_(&sandbox), options_(std::move(options)) {
    description_ =
        "Executes a bash command in the task's sandbox and returns its output (stdout and stderr interleaved).\n\n"
        "Usage:\n"
        "- The working directory persists between calls (a `cd` carries over) and starts at the workspace root. "
        "Each call runs in a fresh shell, so variables, functions and aliases do not persist. Prefer absolute "
        "paths to cd.\n"
        "- timeout is optional, in milliseconds, at most " +
        std::to_string(options_.max_timeout.count()) + " (" + std::to_string(options_.max_timeout.count() / 60000) +
        " minutes); the default is " + std::to_string(options_.default_timeout.count()) + " (" +
        std::to_string(options_.default_timeout.count() / 60000) +
        " minutes). A command still running then is terminated and its output so far returned.\n"
        "- Output longer than " +
        std::to_string(options_.max_output_bytes) +
        " characters is cut in the middle (the start and the end are kept, and the omitted amount is stated). "
        "Redirect large output to a file and inspect it with head, tail or grep.\n"
        "- There is no terminal and no input: interactive programs, prompts and editors do not work (pagers are "
        "disabled). Processes left in the background are stopped when the command returns.\n"
        "- For files, use the Read, Edit, Write, Grep and Glob tools rather than cat, sed, echo > file, grep or "
        "find. Use Bash to build, run, test and profile.\n"
        "- Chain dependent commands with && (or ; when later ones should run regardless). Quote paths that "
        "contain spaces.\n"
        "- description: a short (5-10 words) description of what the command does.";
  }

  [[nodiscard]] std::string_view name() const noexcept { return "Bash"; }
  [[nodiscard]] std::string_view description() const noexcept { return description_; }
  [[nodiscard]] nlohmann::json parameters() const {
    return {
        {"type", "object"},
        {"properties",
         {{"command", {{"type", "string"}, {"minLength", 1}, {"description", "The command to execute."}}},
          {"timeout",
           {{"type", "integer"},
            {"minimum", 1},
            {"maximum", options_.max_timeout.count()},
            {"description", "Optional timeout in milliseconds (max " + std::to_string(options_.max_timeout.count()) +
                                ", default " + std::to_string(options_.default_timeout.count()) + ")."}}},
          {"description", detail::property("string",
                                           "Clear, concise description of what this command does in 5-10 words, "
                                           "e.g. \"Build the CUDA extension\".")}}},
        {"required", {"command"}},
        {"additionalProperties", false}};
  }

  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return detail::guarded_invoke(name(), parameters(), arguments, [&] { return run(arguments, context); });
  }

 private:
  ToolResult run(const nlohmann::json& arguments, ToolContext& context) {
    using detail::ToolFailure;
    const std::string command_text = detail::string_argument(arguments, "command");
    if (command_text.find_first_not_of(" \t\r\n") == std::string::npos) throw ToolFailure("The command is empty.");
    const std::chrono::milliseconds timeout{
        detail::integer_argument(arguments, "timeout").value_or(options_.default_timeout.count())};

    std::error_code ignored;
    const std::filesystem::path workspace = std::filesystem::absolute(context.workspace(), ignored).lexically_normal();
    std::filesystem::path working_directory =
        std::filesystem::absolute(context.working_directory(), ignored).lexically_normal();
    if (context.working_directory().empty()) working_directory = workspace;
    const std::string marker = detail::random_marker();

    Command command;
    command.argv = {options_.shell,
                    "--noprofile",
                    "--norc",
                    "-c",
                    std::string(detail::bash_wrapper_script),
                    "cuda-agent-bash",
                    command_text,
                    working_directory.string(),
                    marker};
    command.environment = non_interactive_environment();
    for (const auto& [variable, value] : options_.environment.variables()) command.environment.set(variable, value);
    command.working_directory = workspace;
    command.timeout = timeout;
    command.output_limit = std::max<std::size_t>(2 * options_.max_output_bytes, 64 * 1024);
    command.merge_stderr = true;
    command.limits = options_.limits;
    command.cancellation = context.cancellation();

    CommandResult result;
    try {
      result = sandbox_->run(command);
    } catch (const SandboxError& error) {
      throw ToolFailure(std::string("The sandbox could not run the command: ") + error.what());
    } catch (const ProcessError& error) {
      throw ToolFailure(std::string("The command could not be started: ") + error.what());
    }

    // The working directory the shell ended in, printed after the marker.
    std::string raw = std::move(result.standard_output.text);
    std::optional<std::filesystem::path> ended_in;
    std::uint64_t total_bytes = result.standard_output.total_bytes;
    if (const std::size_t at = raw.rfind(marker); at != std::string::npos) {
      const std::size_t line_end = raw.find('\n', at);
      ended_in = raw.substr(at + marker.size(),
                            line_end == std::string::npos ? std::string::npos : line_end - at - marker.size());
      const std::size_t cut_begin = at > 0 && raw[at - 1] == '\n' ? at - 1 : at;
      const std::size_t cut_end = line_end == std::string::npos ? raw.size() : line_end + 1;
      raw.erase(cut_begin, cut_end - cut_begin);
      total_bytes -= std::min<std::uint64_t>(total_bytes, cut_end - cut_begin);
    }

    // Where the sandbox kept only both ends of the output, continue from its two parts.
    std::string_view head = raw;
    std::string_view tail;
    std::uint64_t gap = 0;
    if (result.standard_output.elided_bytes > 0) {
      const std::string elision =
          "\n[... " + std::to_string(result.standard_output.elided_bytes) + " bytes elided ...]\n";
      if (const std::size_t at = raw.find(elision); at != std::string::npos) {
        head = std::string_view(raw).substr(0, at);
        tail = std::string_view(raw).substr(at + elision.size());
        gap = result.standard_output.elided_bytes;
      }
    }
    const std::string clean_head = detail::sanitize_utf8(detail::strip_terminal_controls(head));
    const std::string clean_tail = detail::sanitize_utf8(detail::strip_terminal_controls(tail));
    detail::MidTruncated output =
        detail::mid_truncate(clean_head, gap, clean_tail, options_.max_output_bytes,
                             "redirect the output to a file and inspect it with head, tail or grep");
    while (!output.text.empty() && (output.text.back() == '\n' || output.text.back() == ' ')) output.text.pop_back();

    std::string notes;
    const auto note = [&](const std::string& text) { notes += (notes.empty() ? "" : "\n") + text; };
    if (result.timed_out)
      note("Command timed out after " + std::to_string(timeout.count()) +
           " ms and was terminated. If it needs longer, pass a larger timeout (at most " +
           std::to_string(options_.max_timeout.count()) + " ms), or make it faster.");
    else if (result.cancelled)
      note("Command was cancelled.");
    else if (result.signal)
      note("Command was killed by " + detail::signal_name(*result.signal) + parenthesized(limits_hit(result)) + ".");
    else if (result.exit_code && *result.exit_code != 0)
      note("Exit code " + std::to_string(*result.exit_code) +
           parenthesized(signal_behind_exit_code(*result.exit_code), limits_hit(result)));

    std::filesystem::path next_directory = working_directory;
    if (ended_in && !ended_in->empty()) next_directory = *ended_in;
    if (!next_directory.is_absolute() ||
        (!detail::lexically_inside(next_directory, workspace) && next_directory.lexically_normal() != workspace)) {
      note("Shell cwd was reset to " + workspace.string() +
           " (commands may leave the working directory only "
           "within the workspace).");
      next_directory = workspace;
    }
    context.set_working_directory(next_directory.lexically_normal());

    const bool failed = !result.succeeded();
    std::string text = output.text;
    if (text.empty())
      text = failed ? std::string("(The command produced no output.)")
                    : std::string("(The command completed successfully and produced no output.)");
    if (!notes.empty()) text += "\n\n" + notes;

    nlohmann::json metadata = {{"exit_code", result.exit_code ? nlohmann::json(*result.exit_code) : nlohmann::json()},
                               {"signal", result.signal ? nlohmann::json(*result.signal) : nlohmann::json()},
                               {"timed_out", result.timed_out},
                               {"cancelled", result.cancelled},
                               {"wall_time_ms", std::chrono::duration<double, std::milli>(result.wall_time).count()},
                               {"output_bytes", total_bytes},
                               {"omitted_bytes", output.omitted_bytes},
                               {"working_directory", detail::sanitize_utf8(next_directory.lexically_normal().string())},
                               {"sandbox", result.sandbox},
                               {"confined", result.confined},
                               {"description", detail::string_argument(arguments, "description")}};
    return failed ? ToolResult::error(std::move(text), std::move(metadata))
                  : ToolResult::success(std::move(text), std::move(metadata));
  }

  /// The limits a command ran into, in words ("it exceeded the memory limit, ...").
  static std::string limits_hit(const CommandResult& result) {
    std::string text;
    for (const LimitKind kind : result.limits_hit) {
      if (kind == LimitKind::wall_time) continue;
      text += text.empty() ? "" : ", ";
      switch (kind) {
        case LimitKind::memory:
          text += "it exceeded the memory limit";
          break;
        case LimitKind::cpu_time:
          text += "it exceeded the CPU time limit";
          break;
        case LimitKind::file_size:
          text += "it exceeded the file size limit";
          break;
        case LimitKind::open_files:
          text += "it exceeded the open files limit";
          break;
        case LimitKind::processes:
          text += "it exceeded the process limit";
          break;
        case LimitKind::wall_time:
          break;
      }
    }
    return text;
  }

  /// A shell reports a command killed by signal N as exit status 128 + N (and so does
  /// bubblewrap for the shell itself): name the signal, which says more than the number.
  static std::string signal_behind_exit_code(int exit_code) {
    if (exit_code <= 128 || exit_code > 128 + 64) return {};
    return "128 + " + detail::signal_name(exit_code - 128) +
           ": the command, or the last one it ran, was killed by "
           "that signal";
  }

  static std::string parenthesized(const std::string& first, const std::string& second = {}) {
    const std::string both = first.empty() ? second : second.empty() ? first : first + "; " + second;
    return both.empty() ? both : " (" + both + ")";
  }

  S* sandbox_;
  BashOptions options_;
  std::string description_;
};

}  // namespace cuda_agent
