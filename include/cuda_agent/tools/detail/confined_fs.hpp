// SPDX-License-Identifier: Apache-2.0
#pragma once

/// File access confined to a workspace directory, for tools that act on a model's
/// behalf with the host's privileges.
///
/// Every path is resolved beneath the workspace's directory descriptor, never as a
/// string: `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` where the kernel has it,
/// otherwise a walk that opens one component at a time with O_NOFOLLOW, keeps the
/// descriptor of every directory it passed (so ".." never re-resolves a name) and
/// expands symbolic links itself, refusing absolute targets and any ".." above the root.
/// Files are then opened, created and renamed relative to the descriptor of the
/// directory that holds them, so a symbolic link swapped in between a check and its use
/// cannot redirect the operation outside the workspace.

#include <array>        // array
#include <cerrno>       // errno, E*
#include <chrono>       // file_clock, sys_time, nanoseconds
#include <cstdint>      // uint64_t
#include <cstdio>       // snprintf
#include <cstring>      // strerror
#include <deque>        // deque
#include <filesystem>   // path, file_time_type
#include <functional>   // function
#include <memory>       // unique_ptr
#include <optional>     // optional
#include <random>       // random_device
#include <stop_token>   // stop_token
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move, pair
#include <vector>       // vector

#include <dirent.h>       // fdopendir, readdir, closedir, DT_*
#include <fcntl.h>        // openat, O_*, AT_*
#include <sys/stat.h>     // fstat, fstatat, mkdirat, fchmod
#include <sys/syscall.h>  // SYS_openat2
#include <unistd.h>       // read, write, close, readlinkat, fchown, fchownat, renameat, unlinkat, geteuid

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>  // open_how, RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS
#define CUDA_AGENT_HAVE_OPENAT2_HEADER 1
#endif

#include "cuda_agent/detail/ownership.hpp"  // running_as_root
#include "cuda_agent/process.hpp"           // detail::UniqueFd, UserIdentity
#include "cuda_agent/tools/detail/text.hpp"
#include "cuda_agent/tools/detail/tool_failure.hpp"
#include "cuda_agent/tools/file_access.hpp"

namespace cuda_agent::detail {

[[nodiscard]] inline std::filesystem::file_time_type to_file_time(const timespec& time) {
  using namespace std::chrono;
  const sys_time<nanoseconds> system{seconds(time.tv_sec) + nanoseconds(time.tv_nsec)};
  return time_point_cast<std::filesystem::file_time_type::duration>(file_clock::from_sys(system));
}

[[nodiscard]] inline std::filesystem::file_time_type modification_time(const struct stat& status) {
  return to_file_time(status.st_mtim);
}

/// The components of a relative path; empty components and "." are dropped.
[[nodiscard]] inline std::vector<std::string> path_components(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

/// `text` shortened for a message (paths can be thousands of bytes long).
[[nodiscard]] inline std::string shown_path(std::string_view text) {
  if (text.size() <= 300) return sanitize_utf8(text);
  return sanitize_utf8(text.substr(0, utf8_boundary_at_or_before(text, 140))) + "[..." +
         std::to_string(text.size() - 280) + " bytes...]" +
         sanitize_utf8(text.substr(utf8_boundary_at_or_before(text, text.size() - 140)));
}

/// What an errno from resolving or opening `shown` means, for the model.
[[nodiscard]] inline std::string describe_path_error(int error, std::string_view shown) {
  const std::string path = shown_path(shown);
  switch (error) {
    case ENOENT:
      return path + " does not exist.";
    case ENOTDIR:
      return path + ": a component of the path is not a directory.";
    case EXDEV:
      return path +
             " leads outside the workspace (through '..' or a symbolic link); file tools only reach files inside "
             "the workspace, and symbolic links are followed only while they stay inside it.";
    case ELOOP:
      return path + " goes through too many symbolic links, or is a symbolic link where a file was expected.";
    case ENAMETOOLONG:
      return "The path " + path + " is too long: each file name is limited to 255 bytes and a path to 4096.";
    case EACCES:
    case EPERM:
      return "Permission denied: " + path + ".";
    case EISDIR:
      return path + " is a directory.";
    case ENOSPC:
      return "No space left on the device while writing " + path + ".";
    case EDQUOT:
      return "The disk quota was exceeded while writing " + path + ".";
    case EFBIG:
      return path + " would exceed the maximum file size.";
    case EROFS:
      return path + " is on a read-only file system.";
    default:
      return path + ": " + std::strerror(error) + ".";
  }
}

[[nodiscard]] inline UniqueFd duplicate_fd(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) throw ToolFailure(std::string("cannot duplicate a directory descriptor: ") + std::strerror(errno));
  return UniqueFd(copy);
}

/// A directory entry reached beneath the root: the directory that holds it (resolved
/// and open) and its name there. An empty name stands for the directory itself.
struct BeneathEntry {
  UniqueFd directory;
  std::string name;
};

/// The identity of a file: device and inode.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};

[[nodiscard]] inline FileIdentity identity_of(const struct stat& status) noexcept {
  return {status.st_dev, status.st_ino};
}

/// The workspace directory, opened once, and every path operation beneath it.
class ConfinedRoot {
 public:
  explicit ConfinedRoot(const std::filesystem::path& workspace, PathResolution resolution = PathResolution::automatic) {
    std::error_code ignored;
    std::filesystem::path absolute = std::filesystem::absolute(workspace, ignored).lexically_normal();
    std::string text = absolute.string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    path_ = text;
    canonical_ = std::filesystem::weakly_canonical(path_, ignored);
    if (canonical_.empty()) canonical_ = path_;

    const int fd = ::open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      throw ToolFailure("The workspace " + path_.string() + " cannot be opened: " + std::strerror(errno) + ".");
    fd_.reset(fd);
    struct stat status {};
    if (::fstat(fd_.get(), &status) != 0)
      throw ToolFailure("The workspace " + path_.string() + " cannot be examined: " + std::strerror(errno) + ".");
    identity_ = identity_of(status);
    owner_ = {status.st_uid, status.st_gid};
    chown_new_files_ = running_as_root();
    use_openat2_ = resolution == PathResolution::kernel_beneath ||
                   (resolution == PathResolution::automatic && kernel_supports_openat2());
    if (resolution == PathResolution::kernel_beneath && !kernel_supports_openat2())
      throw ToolFailure("openat2 with RESOLVE_BENEATH is not available on this kernel.");
  }

  /// The workspace as an absolute, lexically normal path without a trailing slash.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] FileIdentity identity() const noexcept { return identity_; }
  [[nodiscard]] bool uses_openat2() const noexcept { return use_openat2_; }

  /// Where a path the model wrote lies, relative to the workspace and lexically normal
  /// ("" for the workspace itself). Relative paths are taken relative to the workspace.
  /// Throws ToolFailure for paths outside it, and for paths no file can have.
  [[nodiscard]] std::string relative(std::string_view text, std::string_view parameter = "file_path") const {
    if (text.find('\0') != std::string_view::npos)
      throw ToolFailure("The parameter `" + std::string(parameter) + "` contains a NUL character; paths cannot.");
    if (text.size() > 4096) throw ToolFailure(describe_path_error(ENAMETOOLONG, text));
    const std::filesystem::path given{std::string(text)};
    std::filesystem::path relative_path;
    if (given.is_absolute()) {
      const std::filesystem::path normal = given.lexically_normal();
      relative_path = inside(normal, path_);
      if (relative_path.empty()) relative_path = inside(normal, canonical_);
      if (relative_path.empty())
        throw ToolFailure(shown_path(text) + " is outside the workspace " + path_.string() +
                          ". File tools only reach files inside the workspace; use a path under " + path_.string() +
                          " (or one relative to it).");
    } else {
      relative_path = given.lexically_normal();
    }
    std::string result = relative_path.generic_string();
    while (!result.empty() && result.back() == '/') result.pop_back();
    if (result == ".") result.clear();
    if (result == ".." || result.starts_with("../"))
      throw ToolFailure(shown_path(text) + " is outside the workspace " + path_.string() +
                        " ('..' leads above it). File tools only reach files inside the workspace.");
    return result;
  }

  /// The absolute path of a workspace-relative one, as the model is shown it.
  [[nodiscard]] std::string absolute(std::string_view relative_path) const {
    if (relative_path.empty()) return path_.string();
    return (path_ / std::string(relative_path)).string();
  }

  /// Opens an existing entry beneath the root; returns 0 or an errno. Symbolic links are
  /// followed while they stay beneath the root; with `follow_final` false, a link in the
  /// last position is not followed (O_NOFOLLOW semantics).
  [[nodiscard]] int try_open(std::string_view relative_path, int flags, bool follow_final, UniqueFd& out) const {
    const std::string target = relative_path.empty() ? std::string(".") : std::string(relative_path);
#ifdef CUDA_AGENT_HAVE_OPENAT2_HEADER
    if (use_openat2_) {
      open_how how{};
      how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC | (follow_final ? 0 : O_NOFOLLOW));
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
      for (int attempt = 0; attempt < 16; ++attempt) {
        const long fd = ::syscall(openat2_syscall_number(), fd_.get(), target.c_str(), &how, sizeof how);
        if (fd >= 0) {
          out.reset(static_cast<int>(fd));
          return 0;
        }
        // EAGAIN: a concurrent rename raced with ".." resolution; the kernel asks to retry.
        if (errno != EAGAIN && errno != EINTR) return errno;
      }
      return EAGAIN;
    }
#endif
    for (int attempt = 0; attempt < 8; ++attempt) {
      BeneathEntry entry;
      if (const int error = walk(relative_path, follow_final, entry); error != 0) return error;
      const int fd = ::openat(entry.directory.get(), entry.name.empty() ? "." : entry.name.c_str(),
                              flags | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0) {
        out.reset(fd);
        return 0;
      }
      // The last component turned into a symbolic link after the walk looked at it:
      // walk again, so that the link is expanded (and checked) like any other.
      if (errno == ELOOP && follow_final) continue;
      return errno;
    }
    return ELOOP;
  }

  /// try_open, throwing ToolFailure with a message about `relative_path` on failure.
  [[nodiscard]] UniqueFd open(std::string_view relative_path, int flags, bool follow_final = true) const {
    UniqueFd fd;
    if (const int error = try_open(relative_path, flags, follow_final, fd); error != 0)
      throw ToolFailure(describe_path_error(error, absolute(relative_path)));
    return fd;
  }

  /// The directory that holds the last component of `relative_path` (opened beneath the
  /// root) and that component's name, which is not followed if it is a symbolic link.
  /// With `create_parents`, missing directories are created, owned like the workspace;
  /// `before_create` sees each directory about to receive a new one and may throw.
  [[nodiscard]] BeneathEntry parent_of(std::string_view relative_path, bool create_parents,
                                       const std::function<void(int)>& before_create = {}) const {
    std::vector<std::string> parts = path_components(relative_path);
    if (parts.empty()) throw ToolFailure(path_.string() + " is the workspace directory itself, not a file.");
    std::string name = std::move(parts.back());
    parts.pop_back();

    UniqueFd directory = duplicate_fd(fd_.get());
    std::string prefix;
    for (const std::string& part : parts) {
      const std::string next_prefix = prefix.empty() ? part : prefix + "/" + part;
      UniqueFd next;
      int error = try_open(next_prefix, O_PATH | O_DIRECTORY, true, next);
      if (error == ENOENT && create_parents) {
        if (before_create) before_create(directory.get());
        if (::mkdirat(directory.get(), part.c_str(), 0755) == 0) {
          // Best effort, as give_to: a directory left root-owned only refuses the sandbox's writes.
          if (chown_new_files_ &&
              ::fchownat(directory.get(), part.c_str(), owner_.uid, owner_.gid, AT_SYMLINK_NOFOLLOW) != 0) {
          }
        } else if (errno != EEXIST) {
          throw ToolFailure("Cannot create the directory " + shown_path(absolute(next_prefix)) + ": " +
                            std::strerror(errno) + ".");
        }
        error = try_open(next_prefix, O_PATH | O_DIRECTORY, true, next);
      }
      if (error != 0) throw ToolFailure(describe_path_error(error, absolute(next_prefix)));
      directory = std::move(next);
      prefix = next_prefix;
    }
    if (name.size() > 255) throw ToolFailure(describe_path_error(ENAMETOOLONG, absolute(relative_path)));
    return {std::move(directory), std::move(name)};
  }

  /// Gives a file or directory this tool created to the workspace's owner, so that the
  /// sandbox user (who owns the workspace) can change it later. Only root can, and needs to.
  void give_to_owner(int fd) const noexcept { give_to(fd, owner_); }
  /// A file that replaces another keeps that one's owner. Best effort: a file left
  /// root-owned stays readable in the sandbox, and a write to it there fails with EACCES.
  void give_to(int fd, const UserIdentity& identity) const noexcept {
    if (chown_new_files_ && ::fchown(fd, identity.uid, identity.gid) != 0) return;
  }

 private:
  static long openat2_syscall_number() noexcept {
#ifdef SYS_openat2
    return SYS_openat2;
#else
    return 437;  // the same on every architecture: it postdates the unified syscall table
#endif
  }

  [[nodiscard]] bool kernel_supports_openat2() const noexcept {
#ifdef CUDA_AGENT_HAVE_OPENAT2_HEADER
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const long fd = ::syscall(openat2_syscall_number(), fd_.get(), ".", &how, sizeof how);
    if (fd < 0) return false;  // ENOSYS on old kernels, EPERM under some seccomp filters
    ::close(static_cast<int>(fd));
    return true;
#else
    return false;
#endif
  }

  /// `normal` relative to `base` when it lies inside it (or is it: "."), else empty.
  static std::filesystem::path inside(const std::filesystem::path& normal, const std::filesystem::path& base) {
    std::filesystem::path relative_path = normal.lexically_relative(base);
    if (relative_path.empty()) return {};
    const std::string text = relative_path.generic_string();
    if (text == ".." || text.starts_with("../")) return {};
    return relative_path;
  }

  /// Resolves `relative_path` one component at a time (see the file comment). On success
  /// `out` holds the directory of the last component and its name; a last component that
  /// does not exist is not an error (the caller may create it).
  int walk(std::string_view relative_path, bool follow_final, BeneathEntry& out) const {
    std::deque<std::string> pending;
    for (std::string& part : path_components(relative_path)) pending.push_back(std::move(part));
    std::vector<UniqueFd> stack;
    stack.push_back(duplicate_fd(fd_.get()));
    int links = 0;
    while (!pending.empty()) {
      std::string part = std::move(pending.front());
      pending.pop_front();
      if (part == "..") {
        if (stack.size() == 1) return EXDEV;
        stack.pop_back();
        continue;
      }
      const bool last = pending.empty();
      const int fd = ::openat(stack.back().get(), part.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        if (errno == ENOENT && last) {
          out = {std::move(stack.back()), std::move(part)};
          return 0;
        }
        return errno;
      }
      UniqueFd entry(fd);
      struct stat status {};
      if (::fstat(entry.get(), &status) != 0) return errno;
      if (S_ISLNK(status.st_mode) && (!last || follow_final)) {
        if (++links > 40) return ELOOP;
        std::array<char, 4097> target{};
        const ssize_t length = ::readlinkat(entry.get(), "", target.data(), target.size() - 1);
        if (length < 0) return errno;
        const std::string_view text(target.data(), static_cast<std::size_t>(length));
        if (text.empty()) return ENOENT;
        if (text.front() == '/') return EXDEV;  // absolute targets are refused, as RESOLVE_BENEATH does
        std::vector<std::string> expanded = path_components(text);
        for (auto each = expanded.rbegin(); each != expanded.rend(); ++each) pending.push_front(std::move(*each));
        continue;
      }
      if (last) {
        out = {std::move(stack.back()), std::move(part)};
        return 0;
      }
      if (!S_ISDIR(status.st_mode)) return ENOTDIR;
      stack.push_back(std::move(entry));
    }
    out = {std::move(stack.back()), std::string()};
    return 0;
  }

  std::filesystem::path path_;
  std::filesystem::path canonical_;
  UniqueFd fd_;
  FileIdentity identity_;
  UserIdentity owner_{0, 0};
  bool chown_new_files_ = false;
  bool use_openat2_ = false;
};

/// Paths the tools must not modify, matched by name and by identity: a symbolic or hard
/// link to a protected file, or a directory reached through a link into a protected
/// directory, is protected too.
class ProtectedPaths {
 public:
  ProtectedPaths(const ConfinedRoot& root, const std::vector<std::filesystem::path>& paths) : root_(&root) {
    for (const std::filesystem::path& each : paths) {
      std::string relative_path;
      try {
        relative_path = root.relative(each.string(), "protected path");
      } catch (const ToolFailure&) {
        continue;  // outside the workspace: the tools cannot reach it anyway
      }
      Item item{relative_path, std::nullopt};
      UniqueFd fd;
      struct stat status {};
      if (root.try_open(relative_path, O_PATH, true, fd) == 0 && ::fstat(fd.get(), &status) == 0)
        item.identity = identity_of(status);
      items_.push_back(std::move(item));
    }
  }

  /// The protected path that covers the entry `name` in `directory` (reached as
  /// `relative_path`), if any.
  [[nodiscard]] std::optional<std::string> covering(std::string_view relative_path, int directory,
                                                    std::string_view name) const {
    for (const Item& item : items_) {
      if (item.relative.empty() || relative_path == item.relative ||
          (relative_path.size() > item.relative.size() && relative_path.starts_with(item.relative) &&
           relative_path[item.relative.size()] == '/'))
        return item.relative;
    }
    if (directory < 0) return std::nullopt;  // nothing opened yet: the names are all there is to check
    if (!name.empty()) {
      struct stat status {};
      const std::string entry(name);
      if (::fstatat(directory, entry.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0)
        if (auto found = matching(identity_of(status))) return found;
    }
    return covering_directory(directory);
  }

  /// The protected directory that `directory` lies in (or is), if any.
  [[nodiscard]] std::optional<std::string> covering_directory(int directory) const {
    UniqueFd current = duplicate_fd(directory);
    for (int depth = 0; depth < 4096; ++depth) {
      struct stat status {};
      if (::fstat(current.get(), &status) != 0) return std::nullopt;
      const FileIdentity here = identity_of(status);
      if (auto found = matching(here)) return found;
      if (here == root_->identity()) return std::nullopt;
      const int parent = ::openat(current.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (parent < 0) return std::nullopt;
      UniqueFd up(parent);
      struct stat parent_status {};
      if (::fstat(up.get(), &parent_status) != 0 || identity_of(parent_status) == here) return std::nullopt;
      current = std::move(up);
    }
    return std::nullopt;
  }

  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }

 private:
  struct Item {
    std::string relative;
    std::optional<FileIdentity> identity;
  };

  [[nodiscard]] std::optional<std::string> matching(const FileIdentity& identity) const {
    for (const Item& item : items_)
      if (item.identity && *item.identity == identity) return item.relative;
    return std::nullopt;
  }

  const ConfinedRoot* root_;
  std::vector<Item> items_;
};

/// Reads a whole open file. Throws ToolFailure if it is larger than `limit` bytes.
[[nodiscard]] inline std::string read_all(int fd, std::uint64_t limit, std::string_view shown) {
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw ToolFailure(describe_path_error(errno, shown));
  if (static_cast<std::uint64_t>(status.st_size) > limit)
    throw ToolFailure(shown_path(shown) + " is " + format_size(static_cast<std::uint64_t>(status.st_size)) +
                      ", more than the " + format_size(limit) + " this tool handles.");
  std::string content;
  content.reserve(static_cast<std::size_t>(status.st_size));
  std::array<char, 65536> buffer{};
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ToolFailure(describe_path_error(errno, shown));
    }
    if (n == 0) break;
    content.append(buffer.data(), static_cast<std::size_t>(n));
    if (content.size() > limit)
      throw ToolFailure(shown_path(shown) + " grew past the " + format_size(limit) +
                        " this tool handles while it was read.");
  }
  return content;
}

/// Whether the bytes look binary: a NUL byte, as git and ripgrep decide.
[[nodiscard]] inline bool looks_binary(std::string_view bytes) noexcept {
  return bytes.find('\0') != std::string_view::npos;
}

/// Replaces the entry `at` with `content` atomically: a temporary file in the same
/// directory, written in full, then renamed over the old one. Readers see the old or the
/// new file, never a part. The new file keeps the mode and owner of the file it replaces;
/// a new file gets mode 0644 and the workspace's owner. Returns the new file's status.
inline struct stat replace_file_atomically(const ConfinedRoot& root, const BeneathEntry& at, std::string_view content,
                                           const struct stat* existing, std::string_view shown) {
  std::random_device random;
  std::string temporary;
  UniqueFd file;
  for (int attempt = 0; attempt < 16 && !file; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, "%08x%08x", random(), random());
    temporary = std::string(".cuda-agent-write-") + suffix;
    const int fd =
        ::openat(at.directory.get(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0)
      file.reset(fd);
    else if (errno != EEXIST)
      throw ToolFailure(describe_path_error(errno, shown));
  }
  if (!file) throw ToolFailure("Cannot create a temporary file next to " + shown_path(shown) + ".");
  const auto discard = [&] { ::unlinkat(at.directory.get(), temporary.c_str(), 0); };

  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(file.get(), content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      discard();
      throw ToolFailure(describe_path_error(error, shown));
    }
    written += static_cast<std::size_t>(n);
  }
  ::fchmod(file.get(), existing ? (existing->st_mode & 07777) : 0644);
  if (existing)
    root.give_to(file.get(), {existing->st_uid, existing->st_gid});
  else
    root.give_to_owner(file.get());
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) {
    const int error = errno;
    discard();
    throw ToolFailure(describe_path_error(error, shown));
  }
  file.reset();
  if (::renameat(at.directory.get(), temporary.c_str(), at.directory.get(), at.name.c_str()) != 0) {
    const int error = errno;
    discard();
    throw ToolFailure(describe_path_error(error, shown));
  }
  return status;
}

/// One regular file found by `list_files`.
struct ListedFile {
  /// Relative to the workspace.
  std::string relative;
  std::filesystem::file_time_type modified;
  std::uint64_t size = 0;
};

struct FileListing {
  std::vector<ListedFile> files;
  /// The walk stopped early: too many entries, cancelled, or out of time.
  bool incomplete = false;
  std::string incomplete_reason;
};

struct ListOptions {
  /// Entries whose name starts with '.' are skipped unless this is set.
  bool include_hidden = false;
  std::size_t max_entries = 200'000;
  std::size_t max_depth = 128;
  std::stop_token cancellation;
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

/// Every regular file under the directory `relative_dir` of the workspace. Symbolic
/// links are not followed (as ripgrep does by default), so the walk cannot leave the
/// workspace; subdirectories are opened with O_NOFOLLOW relative to their parent.
[[nodiscard]] inline FileListing list_files(const ConfinedRoot& root, const std::string& relative_dir,
                                            const ListOptions& options) {
  struct DirCloser {
    void operator()(DIR* directory) const noexcept { ::closedir(directory); }
  };
  struct Pending {
    std::string relative;
    std::size_t depth;
  };
  FileListing listing;
  std::vector<Pending> stack;
  stack.push_back({relative_dir, 0});
  std::size_t entries = 0;
  bool first = true;
  while (!stack.empty()) {
    Pending current = std::move(stack.back());
    stack.pop_back();
    if (options.cancellation.stop_requested()) {
      listing.incomplete = true;
      listing.incomplete_reason = "cancelled";
      break;
    }
    if (options.deadline && std::chrono::steady_clock::now() > *options.deadline) {
      listing.incomplete = true;
      listing.incomplete_reason = "out of time";
      break;
    }
    // Each directory is opened from the root when its turn comes (so that a wide tree
    // does not hold a descriptor per pending directory), without following a link in
    // the last position: a directory replaced by a link since it was listed is skipped.
    UniqueFd opened;
    if (first) {
      opened = root.open(current.relative, O_RDONLY | O_DIRECTORY);
      first = false;
    } else if (root.try_open(current.relative, O_RDONLY | O_DIRECTORY, false, opened) != 0) {
      continue;
    }
    const int directory_fd = opened.get();
    std::unique_ptr<DIR, DirCloser> directory(::fdopendir(directory_fd));
    if (!directory) continue;
    (void)opened.release();  // now owned by `directory`
    std::vector<Pending> children;
    while (const dirent* entry = ::readdir(directory.get())) {
      const std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (!options.include_hidden && name.front() == '.') continue;
      if (++entries > options.max_entries) {
        listing.incomplete = true;
        listing.incomplete_reason = "more than " + std::to_string(options.max_entries) + " entries";
        return listing;
      }
      const std::string relative_path =
          current.relative.empty() ? std::string(name) : current.relative + "/" + std::string(name);
      unsigned char type = entry->d_type;
      struct stat status {};
      if (type == DT_UNKNOWN || type == DT_REG) {
        if (::fstatat(directory_fd, entry->d_name, &status, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISREG(status.st_mode) ? DT_REG : S_ISDIR(status.st_mode) ? DT_DIR : DT_UNKNOWN;
      }
      if (type == DT_REG)
        listing.files.push_back({relative_path, modification_time(status), static_cast<std::uint64_t>(status.st_size)});
      else if (type == DT_DIR && current.depth + 1 < options.max_depth)
        children.push_back({relative_path, current.depth + 1});
    }
    for (auto each = children.rbegin(); each != children.rend(); ++each) stack.push_back(std::move(*each));
  }
  return listing;
}

}  // namespace cuda_agent::detail
