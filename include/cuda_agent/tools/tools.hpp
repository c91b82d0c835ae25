// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The standard tools a model works with (Bash, Glob, Grep, Read, Edit, MultiEdit,
/// Write), following the contracts of Claude Code's tools, and the function that puts
/// them in a `ToolRegistry`.
///
/// @code{.cpp}
/// cuda_agent::ProcessSandbox sandbox(options);               // any Sandbox
/// cuda_agent::ToolRegistry tools = cuda_agent::standard_tools(sandbox);
/// cuda_agent::ToolContext context(workspace, {"model.py", "SKILL.md"});
/// cuda_agent::ToolResult result = tools.invoke(call, context);
/// @endcode
///
/// The registry holds the tools; the workspace, its protected paths, the files read so
/// far and the shell's working directory belong to the episode's `ToolContext`, so one
/// registry can serve episode after episode.

#include <utility>  // move

#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/tools/bash.hpp"
#include "cuda_agent/tools/edit.hpp"
#include "cuda_agent/tools/file_access.hpp"
#include "cuda_agent/tools/glob.hpp"
#include "cuda_agent/tools/grep.hpp"
#include "cuda_agent/tools/multi_edit.hpp"
#include "cuda_agent/tools/read.hpp"
#include "cuda_agent/tools/write.hpp"

namespace cuda_agent {

/// Settings of every standard tool.
struct StandardToolOptions {
  BashOptions bash;
  ReadOptions read;
  WriteOptions write;
  EditOptions edit;
  GrepOptions grep;
  GlobOptions glob;
  /// Offer MultiEdit (recent Claude Code builds dropped it; Edit is the stable contract).
  bool include_multi_edit = true;
};

/// A registry with Bash (running in `sandbox`, which must outlive the registry) and the
/// file tools, in the order Bash, Glob, Grep, Read, Edit, MultiEdit, Write.
template <Sandbox S>
[[nodiscard]] ToolRegistry standard_tools(S& sandbox, const StandardToolOptions& options = {}) {
  ToolRegistry registry;
  registry.add(BashTool<S>(sandbox, options.bash));
  registry.add(GlobTool(options.glob));
  registry.add(GrepTool(options.grep));
  registry.add(ReadTool(options.read));
  registry.add(EditTool(options.edit));
  if (options.include_multi_edit) registry.add(MultiEditTool(options.edit));
  registry.add(WriteTool(options.write));
  return registry;
}

/// The same resolution mechanism for every file tool (tests force each one).
inline StandardToolOptions with_path_resolution(StandardToolOptions options, PathResolution resolution) {
  options.read.resolution = resolution;
  options.write.resolution = resolution;
  options.edit.resolution = resolution;
  options.grep.resolution = resolution;
  options.glob.resolution = resolution;
  return options;
}

}  // namespace cuda_agent
