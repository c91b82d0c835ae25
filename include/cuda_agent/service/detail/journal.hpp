// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The evaluation service's journal: one JSON object per line, appended and synced to disk
/// before a request is acknowledged, so that what a client was told was accepted survives a
/// crash of the server. A line cut short by a crash (the last one) is ignored on reading.
///
/// Writing and syncing are apart: lines are written in order under the caller's lock
/// (`write`), and each writer then waits outside it until its line is on disk
/// (`sync_through`). One sync covers every line written before it began, so writers that
/// arrive together share it (a group commit) instead of queueing one sync each behind a lock.

#include <atomic>      // atomic
#include <cerrno>      // errno
#include <cstdint>     // uint64_t
#include <cstring>     // strerror
#include <filesystem>  // path
#include <fstream>     // ifstream
#include <mutex>       // mutex, lock_guard
#include <stdexcept>   // runtime_error
#include <string>      // string, getline
#include <vector>      // vector

#include <fcntl.h>   // open, O_*
#include <unistd.h>  // write, fdatasync, close

#include <nlohmann/json.hpp>

namespace cuda_agent::detail {

class Journal {
 public:
  Journal() = default;
  explicit Journal(std::filesystem::path path) : path_(std::move(path)) { open_for_append(); }
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal() { close_file(); }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Every complete record of the journal at `path`, in order (none when it does not exist).
  [[nodiscard]] static std::vector<nlohmann::json> read(const std::filesystem::path& path) {
    std::vector<nlohmann::json> records;
    std::ifstream stream(path);
    for (std::string line; std::getline(stream, line);) {
      if (line.empty()) continue;
      nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_discarded() || !record.is_object()) continue;  // cut short by a crash
      records.push_back(std::move(record));
    }
    return records;
  }

  /// Appends `record` without waiting for the disk, and returns its sequence number for
  /// `sync_through`. Calls must not overlap (the caller's lock orders the lines); throws
  /// when the disk refuses.
  std::uint64_t write(const nlohmann::json& record) {
    const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    write_all(line);
    return written_.fetch_add(1) + 1;
  }

  /// Returns once every line up to `sequence` is on disk: at once when a sync that began
  /// after it was written has finished, else after a sync of its own. Safe to call from
  /// any thread, while others write.
  void sync_through(std::uint64_t sequence) {
    const std::lock_guard lock(sync_mutex_);
    if (synced_ >= sequence) return;
    const std::uint64_t covered = written_.load();
    if (::fdatasync(fd_) != 0) fail("cannot sync");
    synced_ = covered;
  }

  /// `write` and then `sync_through` (or no sync when `sync` is false: a record whose loss
  /// costs only work done again).
  void append(const nlohmann::json& record, bool sync = true) {
    const std::uint64_t sequence = write(record);
    if (sync) sync_through(sequence);
  }

  /// Replaces the journal with `records` (written beside it, synced, then renamed over it):
  /// a crash leaves either the old journal or the new one.
  void rewrite(const std::vector<nlohmann::json>& records) {
    const std::filesystem::path fresh = path_.string() + ".new";
    {
      Journal replacement;
      replacement.path_ = fresh;
      replacement.open_truncated();
      std::string text;
      for (const nlohmann::json& record : records)
        text += record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      replacement.write_all(text);
      if (::fdatasync(replacement.fd_) != 0) replacement.fail("cannot sync");
    }
    const std::lock_guard lock(sync_mutex_);  // no sync of the old file meanwhile
    close_file();
    std::filesystem::rename(fresh, path_);
    open_for_append();
    synced_ = written_.load();  // the new file was synced whole
  }

 private:
  void open_for_append() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd_ < 0) fail("cannot open");
  }

  void open_truncated() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) fail("cannot open");
  }

  void write_all(const std::string& text) {
    std::size_t written = 0;
    while (written < text.size()) {
      const ::ssize_t n = ::write(fd_, text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write");
      written += static_cast<std::size_t>(n);
    }
  }

  void close_file() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("journal " + path_.string() + ": " + what + ": " + std::strerror(errno));
  }

  std::filesystem::path path_;
  int fd_ = -1;
  std::atomic<std::uint64_t> written_{0};
  std::mutex sync_mutex_;
  std::uint64_t synced_ = 0;  // guarded by sync_mutex_
};

}  // namespace cuda_agent::detail
