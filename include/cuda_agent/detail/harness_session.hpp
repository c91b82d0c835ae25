// SPDX-License-Identifier: Apache-2.0
#pragma once

// The files of one session between the harness's two sides, as the verifier and the timing
// launchers set them up: the two FIFOs the sides talk through, and, for sessions in the
// verifier's warm workers, a pristine copy of what runs and an output folder that only the
// candidate's identity may write. Shared by verify/ and profile/.

#include <cerrno>        // errno
#include <cstring>       // strerror
#include <filesystem>    // path, create_directories, copy_file, permissions, remove_all
#include <stdexcept>     // runtime_error
#include <string>        // string
#include <string_view>   // string_view
#include <system_error>  // error_code, system_error
#include <utility>       // move
#include <vector>        // vector

#include <sys/stat.h>  // mkfifo, chmod

#include "cuda_agent/candidate_files.hpp"   // candidate_model_file
#include "cuda_agent/detail/files.hpp"      // write_file_atomically, published_file_permissions
#include "cuda_agent/detail/ownership.hpp"  // running_as_root, give_path_to
#include "cuda_agent/process.hpp"           // UserIdentity

namespace cuda_agent::detail {

/// A directory its owner may change and everyone may read and enter (the sandbox users
/// read what the host puts there).
inline void make_open_directory(const std::filesystem::path& path) {
  std::filesystem::create_directories(path);
  using std::filesystem::perms;
  std::filesystem::permissions(
      path, perms::owner_all | perms::group_read | perms::group_exec | perms::others_read | perms::others_exec);
}

/// The session's two FIFOs, `to_reference` and `to_candidate`, which both sides' users may
/// open (each side runs as its own user).
inline void make_session_fifos(const std::filesystem::path& session) {
  for (const char* name : {"to_reference", "to_candidate"}) {
    const std::filesystem::path fifo = session / name;
    if (::mkfifo(fifo.c_str(), 0666) != 0 || ::chmod(fifo.c_str(), 0666) != 0)
      throw std::runtime_error("cannot create " + fifo.string() + ": " + std::strerror(errno));
  }
}

/// One session in a harness work directory, removed with this object: `candidates/<id>/`, a
/// copy the host made of what runs (the candidate's model_new.py and its built module, never
/// the candidate's own directory, which it could change while it is judged), and
/// `sessions/<id>/` with the FIFOs and `out/`, the only folder the candidate side may write.
class HarnessSessionFiles {
 public:
  HarnessSessionFiles(const std::filesystem::path& work_directory, const std::string& id, std::string_view model_source,
                      const std::filesystem::path& built_module, const UserIdentity& candidate_identity)
      : copy_(work_directory / "candidates" / id),
        directory_(work_directory / "sessions" / id),
        output_(directory_ / "out") {
    try {
      make_open_directory(copy_);
      write_file_atomically(copy_ / candidate_model_file, model_source);
      std::filesystem::copy_file(built_module, copy_ / built_module.filename());
      std::filesystem::permissions(copy_ / built_module.filename(), published_file_permissions);
      make_open_directory(directory_);
      make_session_fifos(directory_);
      make_open_directory(output_);
      if (running_as_root()) give_path_to(output_, candidate_identity);
    } catch (const std::system_error& error) {
      remove();
      throw std::runtime_error("cannot set up the harness session " + id + ": " + error.what());
    } catch (...) {
      remove();
      throw;
    }
  }
  ~HarnessSessionFiles() { remove(); }
  HarnessSessionFiles(const HarnessSessionFiles&) = delete;
  HarnessSessionFiles& operator=(const HarnessSessionFiles&) = delete;

  /// The copy of what runs: the candidate side's candidate and build directory.
  [[nodiscard]] const std::filesystem::path& copy() const noexcept { return copy_; }
  /// The session directory both sides are given.
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
  /// Where the candidate side writes its outputs.
  [[nodiscard]] const std::filesystem::path& output() const noexcept { return output_; }

  /// Removes `path` with the session too (a socket that a side which died may leave behind).
  void remove_with_session(std::filesystem::path path) { also_removed_.push_back(std::move(path)); }

 private:
  void remove() noexcept {
    std::error_code ignored;
    std::filesystem::remove_all(copy_, ignored);
    std::filesystem::remove_all(directory_, ignored);
    for (const std::filesystem::path& path : also_removed_) std::filesystem::remove_all(path, ignored);
  }

  std::filesystem::path copy_;
  std::filesystem::path directory_;
  std::filesystem::path output_;
  std::vector<std::filesystem::path> also_removed_;
};

}  // namespace cuda_agent::detail
