// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// How the file tools (Read, Write, Edit, MultiEdit, Grep, Glob) reach files.
///
/// The tools run in the host process, often as root, on paths a model chose in a
/// workspace that commands in the sandbox can change at any moment. They therefore:
///   - resolve every path (absolute, or relative to the workspace) beneath the
///     workspace's directory descriptor, never as a string, so that "..", absolute paths
///     elsewhere and symbolic links that lead out are refused;
///   - open, create and rename files relative to the descriptor of the directory that
///     holds them, so a link swapped in between a check and its use cannot redirect them;
///   - refuse to modify the task's protected paths (`ToolContext::protected_paths()`),
///     also when reached through a symbolic or hard link;
///   - write files whole and atomically (a temporary file renamed over the old one),
///     keeping the old file's mode and owner, and give new files and directories to the
///     workspace's owner when running as root, so that the sandbox user can change them.

namespace cuda_agent {

/// The mechanism that keeps path resolution beneath the workspace.
enum class PathResolution {
  /// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) where the kernel offers it (Linux
  /// 5.6 and later, unless a seccomp filter hides it), otherwise `component_walk`.
  automatic,
  /// openat2 only; tools report an error where it is unavailable.
  kernel_beneath,
  /// One component at a time with O_NOFOLLOW, expanding symbolic links in user space
  /// while refusing absolute targets and any ".." above the workspace.
  component_walk,
};

}  // namespace cuda_agent
