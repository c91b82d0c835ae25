// SPDX-License-Identifier: Apache-2.0
#pragma once

// File helpers shared by the task loader, workspaces and the compile driver: whole-file
// reads, atomic replacement (write a temporary, then rename), advisory locks that other
// processes honour, and reading a directory tree that an untrusted user controls without
// ever following a symbolic link out of it.

#include <algorithm>     // sort, min
#include <cerrno>        // errno, EINTR, EWOULDBLOCK
#include <chrono>        // steady_clock, milliseconds
#include <cstddef>       // size_t
#include <cstring>       // strerror
#include <filesystem>    // path, rename, remove, create_directories
#include <fstream>       // ifstream, ofstream
#include <functional>    // function
#include <iterator>      // istreambuf_iterator
#include <map>           // map
#include <optional>      // optional
#include <random>        // random_device
#include <stdexcept>     // runtime_error
#include <string>        // string, to_string
#include <string_view>   // string_view
#include <system_error>  // error_code
#include <thread>        // sleep_for
#include <utility>       // move, exchange
#include <vector>        // vector

#include <dirent.h>    // fdopendir, readdir, closedir
#include <fcntl.h>     // openat, O_NOFOLLOW, O_DIRECTORY
#include <sys/file.h>  // flock
#include <sys/stat.h>  // fstat, S_ISREG, S_ISDIR
#include <unistd.h>    // read, close, getpid

namespace cuda_agent::detail {

/// The whole content of `path`; throws naming the file when it cannot be read.
[[nodiscard]] inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

/// A name for a temporary sibling of `target` that no other thread or process picks.
[[nodiscard]] inline std::filesystem::path temporary_sibling(const std::filesystem::path& target) {
  std::random_device entropy;
  const std::string suffix = std::to_string(::getpid()) + "." + std::to_string(entropy()) + std::to_string(entropy());
  return target.parent_path() / ("." + target.filename().string() + ".tmp." + suffix);
}

/// Files published by the helpers below are readable by everyone (the sandbox user
/// reads cached objects and headers) and writable by their owner only.
inline constexpr std::filesystem::perms published_file_permissions =
    std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | std::filesystem::perms::group_read |
    std::filesystem::perms::others_read;

/// Fills a temporary sibling of `target` with `fill(temporary)`, then renames it over
/// `target`: readers see the old file or the new one, never a torn mix, however many
/// writers race. The temporary is removed on failure.
template <class Fill>
void publish_atomically(const std::filesystem::path& target, std::filesystem::perms permissions, Fill&& fill) {
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::filesystem::path temporary = temporary_sibling(target);
  std::error_code error;
  std::string failure = fill(temporary);
  if (failure.empty()) std::filesystem::permissions(temporary, permissions, error);
  if (failure.empty() && !error) std::filesystem::rename(temporary, target, error);
  if (failure.empty() && !error) return;
  std::error_code ignored;
  std::filesystem::remove(temporary, ignored);
  throw std::runtime_error("cannot write " + target.string() + ": " + (failure.empty() ? error.message() : failure));
}

/// Replaces `target` with `content` atomically.
inline void write_file_atomically(const std::filesystem::path& target, std::string_view content,
                                  std::filesystem::perms permissions = published_file_permissions) {
  publish_atomically(target, permissions, [&](const std::filesystem::path& temporary) {
    std::ofstream stream(temporary, std::ios::binary | std::ios::trunc);
    stream.write(content.data(), static_cast<std::streamsize>(content.size()));
    stream.close();
    return stream ? std::string() : "cannot write " + temporary.string() + ": " + std::strerror(errno);
  });
}

/// Copies `source` over `target` atomically.
inline void copy_file_atomically(const std::filesystem::path& source, const std::filesystem::path& target,
                                 std::filesystem::perms permissions = published_file_permissions) {
  publish_atomically(target, permissions, [&](const std::filesystem::path& temporary) {
    std::error_code error;
    std::filesystem::copy_file(source, temporary, std::filesystem::copy_options::overwrite_existing, error);
    return error ? "cannot copy " + source.string() + ": " + error.message() : std::string();
  });
}

/// An exclusive advisory lock (flock) on a lock file, held for the object's lifetime.
/// Other threads and processes that lock the same file wait; the kernel drops the
/// lock if the holder dies, so a crashed builder never wedges the cache.
class FileLock {
 public:
  FileLock() = default;
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&& other) noexcept {
    if (this != &other) {
      release();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { release(); }

  /// Waits up to `timeout` for the lock on `path` (created if missing); nullopt when
  /// the wait ran out. `waiting` is called once if the lock is not free at once.
  [[nodiscard]] static std::optional<FileLock> acquire(const std::filesystem::path& path,
                                                       std::chrono::milliseconds timeout,
                                                       const std::function<void()>& waiting = {}) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    FileLock lock;
    lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock.fd_ < 0) throw std::runtime_error("cannot open lock file " + path.string() + ": " + std::strerror(errno));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool announced = false;
    for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
      if (::flock(lock.fd_, LOCK_EX | LOCK_NB) == 0) return lock;
      if (errno != EWOULDBLOCK && errno != EINTR)
        throw std::runtime_error("cannot lock " + path.string() + ": " + std::strerror(errno));
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      if (!announced && waiting) waiting();
      announced = true;
      std::this_thread::sleep_for(pause);
    }
  }

 private:
  void release() noexcept {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
    fd_ = -1;
  }
  int fd_ = -1;
};

/// Limits on what is read from a directory an untrusted user controls.
struct TreeReadLimits {
  std::size_t max_files = 256;
  std::size_t max_file_bytes = std::size_t{4} << 20;
  std::size_t max_total_bytes = std::size_t{32} << 20;
  std::size_t max_depth = 8;
};

/// What `read_tree_without_following_links` found.
struct TreeContents {
  /// Regular files by '/'-separated path relative to the root, with their content.
  std::map<std::string, std::string> files;
  /// Entries that were not read, each with the reason ("symbolic link", ...).
  std::vector<std::pair<std::string, std::string>> skipped;
};

namespace tree_reading {

class Descriptor {
 public:
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

inline std::string read_descriptor(int fd, std::size_t limit, const std::string& name) {
  std::string content;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error("cannot read " + name + ": " + std::strerror(errno));
    if (got == 0) return content;
    if (content.size() + static_cast<std::size_t>(got) > limit)
      throw std::runtime_error(name + " is larger than the limit of " + std::to_string(limit) + " bytes");
    content.append(buffer, static_cast<std::size_t>(got));
  }
}

inline void walk(int directory_fd, const std::string& prefix, std::size_t depth, const TreeReadLimits& limits,
                 const std::function<bool(const std::string&)>& wanted, const std::string& root_name, TreeContents& out,
                 std::size_t& total_bytes) {
  const int listing_fd = ::dup(directory_fd);
  if (listing_fd < 0) throw std::runtime_error("cannot read directory " + root_name + "/" + prefix);
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    throw std::runtime_error("cannot list " + root_name + "/" + prefix + ": " + std::strerror(errno));
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());

  for (const std::string& name : names) {
    const std::string relative = prefix.empty() ? name : prefix + "/" + name;
    // O_NOFOLLOW on every component, and O_NONBLOCK so that a FIFO cannot stall us:
    // whatever the untrusted owner swaps in between listing and opening, we either
    // open the entry itself or fail.
    Descriptor fd(::openat(directory_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (fd.get() < 0) {
      out.skipped.emplace_back(relative, errno == ELOOP ? "symbolic link" : std::strerror(errno));
      continue;
    }
    struct stat status {};
    if (::fstat(fd.get(), &status) != 0) {
      out.skipped.emplace_back(relative, std::strerror(errno));
      continue;
    }
    if (S_ISDIR(status.st_mode)) {
      if (depth + 1 > limits.max_depth) {
        out.skipped.emplace_back(relative, "nested deeper than " + std::to_string(limits.max_depth) + " levels");
        continue;
      }
      walk(fd.get(), relative, depth + 1, limits, wanted, root_name, out, total_bytes);
      continue;
    }
    if (!S_ISREG(status.st_mode)) {
      out.skipped.emplace_back(relative, "not a regular file");
      continue;
    }
    if (!wanted(relative)) {
      out.skipped.emplace_back(relative, "not a source file");
      continue;
    }
    if (out.files.size() >= limits.max_files)
      throw std::runtime_error(root_name + " holds more than " + std::to_string(limits.max_files) + " files");
    // Blocking reads from here on: it is a regular file.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    std::string content = read_descriptor(fd.get(), limits.max_file_bytes, root_name + "/" + relative);
    total_bytes += content.size();
    if (total_bytes > limits.max_total_bytes)
      throw std::runtime_error(root_name + " holds more than " + std::to_string(limits.max_total_bytes) +
                               " bytes of source");
    out.files.emplace(relative, std::move(content));
  }
}

}  // namespace tree_reading

/// Reads the regular files below `root` for which `wanted(relative_path)` is true,
/// never following a symbolic link (not even for `root` itself) and never blocking on
/// a FIFO or device. Throws when `root` is not a directory or a limit is exceeded.
[[nodiscard]] inline TreeContents read_tree_without_following_links(
    const std::filesystem::path& root, const std::function<bool(const std::string&)>& wanted,
    const TreeReadLimits& limits = {}) {
  tree_reading::Descriptor fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0)
    throw std::runtime_error("cannot open directory " + root.string() + ": " +
                             (errno == ELOOP || errno == ENOTDIR ? std::string("not a directory (or a symbolic link)")
                                                                 : std::string(std::strerror(errno))));
  TreeContents contents;
  std::size_t total_bytes = 0;
  tree_reading::walk(fd.get(), "", 0, limits, wanted, root.string(), contents, total_bytes);
  return contents;
}

/// Reads one regular file without following a symbolic link in its last component.
[[nodiscard]] inline std::optional<std::string> read_regular_file_without_following_links(
    const std::filesystem::path& path, std::size_t limit) {
  tree_reading::Descriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return std::nullopt;
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0 || !S_ISREG(status.st_mode)) return std::nullopt;
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return tree_reading::read_descriptor(fd.get(), limit, path.string());
}

}  // namespace cuda_agent::detail
