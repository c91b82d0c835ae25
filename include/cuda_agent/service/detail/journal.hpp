// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The evaluation service's journal: one JSON object per line, appended and synced to disk
/// before a request is acknowledged, so that what a client was told was accepted survives a
/// crash of the server. A line cut short by a crash (the last one) is ignored on reading.

#include <cerrno>      // errno
#include <cstring>     // strerror
#include <filesystem>  // path
#include <fstream>     // ifstream
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

  /// Appends `record`, synced to disk unless `sync` is false (a record whose loss costs
  /// only work done again); throws when the disk refuses.
  void append(const nlohmann::json& record, bool sync = true) {
    const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    write_all(line);
    if (sync && ::fdatasync(fd_) != 0) fail("cannot sync");
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
    close_file();
    std::filesystem::rename(fresh, path_);
    open_for_append();
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
};

}  // namespace cuda_agent::detail
