// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Workspace materialization: from a task, a fresh directory laid out as the candidate
/// contract says, ready for an agent.
///
/// ```
/// <workspace>/SKILL.md       read-only: workflow, rules, contract, tools, success criterion
/// <workspace>/model.py       read-only: the reference Model, get_inputs, get_init_inputs
/// <workspace>/<harness...>   read-only: any files the host adds (WorkspaceOptions::read_only_files)
/// <workspace>/kernels/       writable: *.cu *.cuh *.cpp *.h, built into the module `cuda_extension`
/// <workspace>/model_new.py   writable: `import cuda_extension`; class ModelNew(Model's constructor)
/// ```
///
/// SKILL.md is written for this project and embedded (`resources/skill/SKILL.md`); a host
/// replaces it through `WorkspaceOptions::skill`. Either text is rendered with the task
/// and the library policy: `{{task_name}}`, `{{device}}`, `{{allowed_libraries}}`, and the
/// sections `{{#cuda}}...{{/cuda}}`, `{{#cpu}}...{{/cpu}}`, `{{#any_library}}...{{/any_library}}`.
///
/// "Read-only" is enforced by the sandbox (the protected paths are bound read-only) and
/// by the file tools (they refuse protected paths); on disk the protected files are
/// mode 0444 and stay owned by the host, while the rest of the tree is handed to the
/// sandbox user. Nothing trusted is ever read back from a workspace: the trusted
/// evaluation uses the task's reference source and only the candidate's source files.

#include <filesystem>    // path, create_directories, permissions
#include <functional>    // function
#include <map>           // map
#include <optional>      // optional
#include <stdexcept>     // runtime_error
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // system_error
#include <utility>       // move
#include <vector>        // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/ownership.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tasks/task_loader.hpp"
#include "cuda_agent/tool.hpp"

namespace cuda_agent {

/// The workspace could not be created (the directory is not empty, a file cannot be
/// written, a host-supplied path leaves the workspace, ...).
class WorkspaceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A materialized workspace.
struct Workspace {
  std::filesystem::path root;
  /// Relative to `root`: SKILL.md, model.py and the host's read-only files.
  std::vector<std::filesystem::path> protected_paths;
  /// Relative to `root`: kernels/ and model_new.py.
  std::vector<std::filesystem::path> writable_paths;
  std::string device;
  LibraryPolicy libraries;

  /// `protected_paths` made absolute, as sandbox options want them.
  [[nodiscard]] std::vector<std::filesystem::path> absolute_protected_paths() const {
    std::vector<std::filesystem::path> paths;
    for (const auto& each : protected_paths) paths.push_back(root / each);
    return paths;
  }

  /// A tool context for an episode in this workspace.
  [[nodiscard]] ToolContext tool_context() const { return ToolContext(root, protected_paths); }
};

struct WorkspaceOptions {
  /// "cuda" or "cpu": which starter, and which parts of SKILL.md.
  std::string device = "cuda";
  /// What the candidate may use; stated in SKILL.md (the compile driver enforces it).
  LibraryPolicy libraries;
  /// A SKILL.md of the host's own (rendered like the embedded one); empty: the embedded one.
  std::optional<std::string> skill;
  /// Write the starter `kernels/` and `model_new.py`. A task that brings candidate
  /// files (a loaded workspace) gets those instead.
  bool starter = true;
  /// More read-only files (relative path -> content), e.g. the evaluation harness.
  std::map<std::string, std::string> read_only_files;
  /// The user and group the agent's sandbox runs as. Default: nobody (65534) when running
  /// as root, otherwise nothing changes hands.
  std::optional<UserIdentity> sandbox_user;
  /// Hands the tree to the sandbox user. Replaceable (the sandbox component provides
  /// `hand_over_to_sandbox`); the default chowns every path but the protected files.
  std::function<void(const Workspace&, const std::optional<UserIdentity>&)> hand_over;
};

/// Renders a SKILL.md template: `{{name}}` variables and `{{#flag}}...{{/flag}}` sections
/// (kept when the flag is true, dropped otherwise). Unknown names are left as written.
[[nodiscard]] inline std::string render_template(std::string_view text,
                                                 const std::map<std::string, std::string>& values,
                                                 const std::map<std::string, bool>& flags) {
  std::string out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t open = text.find("{{", at);
    if (open == std::string_view::npos) {
      out.append(text.substr(at));
      break;
    }
    out.append(text.substr(at, open - at));
    const std::size_t close = text.find("}}", open + 2);
    if (close == std::string_view::npos) {
      out.append(text.substr(open));
      break;
    }
    const std::string name(text.substr(open + 2, close - open - 2));
    at = close + 2;
    if (!name.empty() && name[0] == '#' && flags.count(name.substr(1))) {
      const std::string end_marker = "{{/" + name.substr(1) + "}}";
      const std::size_t end = text.find(end_marker, at);
      if (end == std::string_view::npos) throw WorkspaceError("SKILL.md template: {{" + name + "}} is never closed");
      if (flags.at(name.substr(1))) out += render_template(text.substr(at, end - at), values, flags);
      at = end + end_marker.size();
      continue;
    }
    if (const auto value = values.find(name); value != values.end()) {
      out += value->second;
      continue;
    }
    out.append(text.substr(open, close + 2 - open));
  }
  return out;
}

/// SKILL.md for `task` under `options` (the embedded text unless the host gave one).
[[nodiscard]] inline std::string render_skill(const Task& task, const WorkspaceOptions& options) {
  std::string text;
  if (options.skill) {
    text = *options.skill;
  } else {
    const auto embedded = embedded_resource("skill/SKILL.md");
    if (!embedded) throw WorkspaceError("the embedded skill/SKILL.md is missing from this build");
    text = std::string(*embedded);
  }
  const bool cuda = options.device == "cuda";
  return render_template(
      text,
      {{"task_name", task.name},
       {"device", options.device},
       {"allowed_libraries", options.libraries.allowed_libraries()}},
      {{"cuda", cuda}, {"cpu", !cuda}, {"any_library", cuda && (options.libraries.cublas || options.libraries.cudnn)}});
}

namespace detail {

/// The default hand-over: the whole tree to the sandbox user but for the protected files,
/// which stay the host's (it wrote them).
inline void hand_over_workspace(const Workspace& workspace, const std::optional<UserIdentity>& user) {
  if (!user || !running_as_root()) return;
  const std::filesystem::path root = std::filesystem::absolute(workspace.root).lexically_normal();
  std::vector<std::filesystem::path> skipped;
  for (const auto& each : workspace.protected_paths) skipped.push_back((root / each).lexically_normal());
  try {
    give_tree_to(root, *user, skipped);
  } catch (const std::system_error& error) {
    throw WorkspaceError("cannot hand the workspace to uid " + std::to_string(user->uid) + ": " +
                         std::string(error.what()));
  }
}

inline std::filesystem::path checked_relative(const std::string& relative) {
  std::filesystem::path normal = std::filesystem::path(relative).lexically_normal();
  if (normal.empty() || normal.is_absolute() || *normal.begin() == ".." || *normal.begin() == ".")
    throw WorkspaceError("refusing to place '" + relative + "' outside the workspace");
  return normal;
}

}  // namespace detail

/// Creates the workspace for `task` in `directory`, which must not exist or be empty.
[[nodiscard]] inline Workspace materialize_workspace(const Task& task, const std::filesystem::path& directory,
                                                     const WorkspaceOptions& options = {}) {
  if (options.device != "cuda" && options.device != "cpu")
    throw WorkspaceError("unknown device '" + options.device + "': use \"cuda\" or \"cpu\"");
  std::error_code error;
  if (std::filesystem::exists(directory, error) && !std::filesystem::is_empty(directory, error))
    throw WorkspaceError(directory.string() + " is not empty: a workspace is always created fresh");
  std::filesystem::create_directories(directory);

  Workspace workspace;
  workspace.root = std::filesystem::absolute(directory).lexically_normal();
  workspace.device = options.device;
  workspace.libraries = options.libraries;

  constexpr auto read_only =
      std::filesystem::perms::owner_read | std::filesystem::perms::group_read | std::filesystem::perms::others_read;
  auto write_protected = [&](const std::filesystem::path& relative, std::string_view content) {
    detail::write_file_atomically(workspace.root / relative, content, read_only);
    workspace.protected_paths.push_back(relative);
  };
  write_protected("SKILL.md", render_skill(task, options));
  write_protected("model.py", task.reference_source);
  for (const auto& [relative, content] : options.read_only_files) {
    const std::filesystem::path path = detail::checked_relative(relative);
    if (path == "SKILL.md" || path == "model.py" || path == candidate_model_file ||
        *path.begin() == candidate_kernels_directory)
      throw WorkspaceError("the read-only file '" + relative + "' would replace part of the workspace contract");
    write_protected(path, content);
  }

  std::filesystem::create_directories(workspace.root / candidate_kernels_directory);
  if (!task.candidate_files.empty()) {
    for (const auto& [relative, content] : task.candidate_files) {
      if (!is_candidate_source_path(relative)) continue;
      detail::write_file_atomically(workspace.root / detail::checked_relative(relative), content);
    }
  } else if (options.starter) {
    const std::string prefix = "starter/" + options.device + "/";
    for (const std::string_view path : embedded_resources_under(prefix))
      detail::write_file_atomically(workspace.root / std::filesystem::path(path.substr(prefix.size())),
                                    *embedded_resource(path));
    const ReferenceModule reference = analyze_reference_source(task.reference_source);
    const auto model_new = embedded_resource("starter/model_new.py");
    if (!model_new) throw WorkspaceError("the embedded starter/model_new.py is missing from this build");
    const std::string& constructor = reference.constructor_signature;
    const std::string& forward = reference.forward_signature;
    detail::write_file_atomically(
        workspace.root / candidate_model_file,
        render_template(*model_new,
                        {{"task_name", task.name},
                         {"constructor_parameters", constructor.empty() ? "" : ", " + constructor},
                         {"forward_parameters", forward.empty() ? ", *inputs" : ", " + forward}},
                        {}));
  }
  workspace.writable_paths = {std::filesystem::path(candidate_kernels_directory),
                              std::filesystem::path(candidate_model_file)};

  const std::optional<UserIdentity> user =
      options.sandbox_user ? options.sandbox_user
                           : (detail::running_as_root() ? std::optional(UserIdentity{65534, 65534}) : std::nullopt);
  if (options.hand_over)
    options.hand_over(workspace, user);
  else
    detail::hand_over_workspace(workspace, user);
  return workspace;
}

}  // namespace cuda_agent
