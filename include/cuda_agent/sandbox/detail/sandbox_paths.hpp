// SPDX-License-Identifier: Apache-2.0
#pragma once

// Path checks shared by the sandboxes: normalising, containment, symbolic links below the
// workspace, and whether the sandbox identity can reach a path at all.

#include <cerrno>      // errno, ENOENT, ENODATA
#include <cstdio>      // snprintf
#include <filesystem>  // path
#include <optional>    // optional
#include <string>      // string, to_string

#include <sys/stat.h>   // lstat, stat, S_IS*
#include <sys/types.h>  // uid_t, gid_t
#include <sys/xattr.h>  // getxattr

#include "cuda_agent/sandbox.hpp"

namespace cuda_agent::detail {

/// `path` made absolute against `base` (default: the working directory), normalised, and
/// without a trailing separator, so that equal places compare equal.
inline std::filesystem::path normal_absolute(const std::filesystem::path& path,
                                             const std::filesystem::path& base = {}) {
  std::filesystem::path result = path.is_absolute() ? path
                                 : base.empty()     ? std::filesystem::absolute(path)
                                                    : base / path;
  result = result.lexically_normal();
  if (result.has_relative_path() && !result.has_filename()) result = result.parent_path();
  return result;
}

/// Whether normalised `inner` is `outer` or below it (by whole components).
inline bool is_within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  auto outer_it = outer.begin();
  auto inner_it = inner.begin();
  for (; outer_it != outer.end(); ++outer_it, ++inner_it)
    if (inner_it == inner.end() || *inner_it != *outer_it) return false;
  return true;
}

/// Throws when an existing component between `root` (excluded) and `target` (included) is
/// a symbolic link. bubblewrap resolves mount destinations while the host's root is still
/// the root, so a link planted inside the workspace would carry a read-only mount
/// somewhere outside the sandbox, and the path it was meant to protect would stay
/// writable.
inline void require_no_links_below(const std::filesystem::path& root, const std::filesystem::path& target,
                                   const std::string& what) {
  std::filesystem::path current = root;
  for (const auto& component : target.lexically_relative(root)) {
    current /= component;
    struct stat status {};
    if (::lstat(current.c_str(), &status) != 0) return;  // the rest does not exist yet
    if (S_ISLNK(status.st_mode))
      throw SandboxError(what + " " + target.string() + " passes through the symbolic link " + current.string() +
                         "; paths made read-only inside the workspace must consist of real directories and "
                         "files, or a link could move the protection elsewhere (was the workspace tampered with?)");
  }
}

inline std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

/// Why the identity (uid, gid, no supplementary groups) cannot reach `path`, or nothing
/// when it can. Checks search permission on every directory above it and on it. A
/// directory carrying an access ACL is given the benefit of the doubt.
inline std::optional<std::string> unreachable_reason(const std::filesystem::path& path, uid_t uid, gid_t gid) {
  if (uid == 0) return std::nullopt;
  std::filesystem::path current;
  for (const auto& component : path) {
    current /= component;
    struct stat status {};
    if (::stat(current.c_str(), &status) != 0) {
      if (errno == ENOENT) return current.string() + " does not exist";
      return std::nullopt;  // not knowable from here; bubblewrap will report it
    }
    if (!S_ISDIR(status.st_mode)) break;
    const mode_t search = status.st_uid == uid ? S_IXUSR : status.st_gid == gid ? S_IXGRP : S_IXOTH;
    if ((status.st_mode & search) != 0) continue;
    if (::getxattr(current.c_str(), "system.posix_acl_access", nullptr, 0) > 0) continue;
    return current.string() + " (mode " + octal_mode(status.st_mode) + ", owner uid " + std::to_string(status.st_uid) +
           ") cannot be searched by uid " + std::to_string(uid) + " gid " + std::to_string(gid);
  }
  return std::nullopt;
}

}  // namespace cuda_agent::detail
