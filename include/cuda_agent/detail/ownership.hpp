// SPDX-License-Identifier: Apache-2.0
#pragma once

// Giving files to the identity sandboxed commands run as: the one place that changes
// owners (the sandbox's and the workspace's hand-over, the compile driver's build
// directories). Only root can, and only root needs to: otherwise commands run as the
// host's own user, who owns everything already. Nothing here follows a symbolic link, so
// a link that an earlier command planted cannot redirect a change of owner.

#include <cerrno>        // errno
#include <filesystem>    // path
#include <string>        // string
#include <system_error>  // system_error, error_code, generic_category
#include <vector>        // vector

#include <dirent.h>    // fdopendir, readdir, closedir
#include <fcntl.h>     // open, openat, O_DIRECTORY, O_NOFOLLOW, AT_SYMLINK_NOFOLLOW
#include <sys/stat.h>  // fstat, fstatat, struct stat
#include <unistd.h>    // geteuid, dup, fchown, fchownat

#include "cuda_agent/process.hpp"  // UserIdentity, detail::UniqueFd

namespace cuda_agent::detail {

[[nodiscard]] inline bool running_as_root() noexcept { return ::geteuid() == 0; }

/// A failure to change an owner, naming what could not be done to which path.
[[noreturn]] inline void throw_ownership_error(const std::filesystem::path& path, const char* what) {
  throw std::system_error(std::error_code(errno, std::generic_category()),
                          "cannot " + std::string(what) + " " + path.string());
}

/// Gives `path` itself (a link is changed, never followed) to `identity`.
inline void give_path_to(const std::filesystem::path& path, const UserIdentity& identity) {
  if (::fchownat(AT_FDCWD, path.c_str(), identity.uid, identity.gid, AT_SYMLINK_NOFOLLOW) != 0)
    throw_ownership_error(path, "change the owner of");
}

/// Gives everything below the open directory `directory` (at `path`) to `identity`,
/// through descriptors only: no other filesystem is entered, and `skipped` (absolute,
/// normal paths) keep their owner. A file with several names may be a hard link to
/// something outside the tree (where fs.protected_hardlinks is off): it keeps its owner.
inline void give_directory_contents_to(int directory, const std::filesystem::path& path, dev_t device,
                                       const UserIdentity& identity,
                                       const std::vector<std::filesystem::path>& skipped) {
  UniqueFd listing_fd(::dup(directory));
  if (!listing_fd) throw_ownership_error(path, "read");
  DIR* listing = ::fdopendir(listing_fd.get());
  if (listing == nullptr) throw_ownership_error(path, "read");
  listing_fd.release();  // owned by the DIR stream now
  struct Closer {
    DIR* listing;
    ~Closer() { ::closedir(listing); }
  } closer{listing};

  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::filesystem::path child = path / name;
    bool skip = false;
    for (const auto& protected_path : skipped) skip = skip || protected_path == child;
    if (skip) continue;

    struct stat status {};
    if (::fstatat(directory, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) != 0) throw_ownership_error(child, "inspect");
    if (status.st_dev != device) continue;
    if (S_ISDIR(status.st_mode)) {
      const UniqueFd child_fd(::openat(directory, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child_fd) throw_ownership_error(child, "open");
      give_directory_contents_to(child_fd.get(), child, device, identity, skipped);
      if (::fchown(child_fd.get(), identity.uid, identity.gid) != 0)
        throw_ownership_error(child, "change the owner of");
      continue;
    }
    if (!S_ISLNK(status.st_mode) && status.st_nlink > 1) continue;
    if (::fchownat(directory, name.c_str(), identity.uid, identity.gid, AT_SYMLINK_NOFOLLOW) != 0)
      throw_ownership_error(child, "change the owner of");
  }
}

/// Gives the directory tree at `root` (absolute and normal) to `identity`, but for
/// `skipped`, as `give_directory_contents_to` does, and then `root` itself.
inline void give_tree_to(const std::filesystem::path& root, const UserIdentity& identity,
                         const std::vector<std::filesystem::path>& skipped = {}) {
  const UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root_fd) throw_ownership_error(root, "open the directory");
  struct stat status {};
  if (::fstat(root_fd.get(), &status) != 0) throw_ownership_error(root, "inspect");
  give_directory_contents_to(root_fd.get(), root, status.st_dev, identity, skipped);
  if (::fchown(root_fd.get(), identity.uid, identity.gid) != 0) throw_ownership_error(root, "change the owner of");
}

}  // namespace cuda_agent::detail
