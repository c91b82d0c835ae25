// SPDX-License-Identifier: Apache-2.0
#pragma once

// Test doubles for the Sandbox concept, used until the sandbox component is in main:
// `RecordingSandbox` runs each command directly (unconfined, and says so) and records
// its argv, so that tests can assert that every compiler and linker call went through
// the sandbox; with `drop_to` set (root only) it runs commands as that user, which is
// the part of confinement that decides what `#include "/etc/shadow"` can read.

#include <cuda_agent/process.hpp>
#include <cuda_agent/sandbox.hpp>

#include <memory>    // shared_ptr, make_shared
#include <mutex>     // mutex, lock_guard
#include <optional>  // optional
#include <string>    // string
#include <utility>   // pair
#include <vector>    // vector

#include <sys/types.h>  // uid_t, gid_t

namespace cuda_agent::testing {

class RecordingSandbox {
 public:
  struct Log {
    std::mutex mutex;
    std::vector<std::vector<std::string>> commands;
  };

  RecordingSandbox() : log_(std::make_shared<Log>()) {}

  /// Commands run as `uid`/`gid` (the caller must be root).
  RecordingSandbox& drop_to(uid_t uid, gid_t gid) {
    identity_ = UserIdentity{uid, gid};
    return *this;
  }

  cuda_agent::CommandResult run(const cuda_agent::Command& command) {
    {
      const std::lock_guard lock(log_->mutex);
      log_->commands.push_back(command.argv);
    }
    cuda_agent::ProcessSpec spec;
    spec.argv = command.argv;
    spec.environment = command.environment;
    spec.working_directory = command.working_directory;
    spec.stdin_data = command.stdin_data;
    spec.timeout = command.timeout;
    spec.output_limit = command.output_limit;
    spec.merge_stderr = command.merge_stderr;
    spec.cancellation = command.cancellation;
    if (identity_) {
      spec.child.uid = identity_->uid;
      spec.child.gid = identity_->gid;
    }
    cuda_agent::CommandResult result;
    static_cast<cuda_agent::ProcessResult&>(result) = cuda_agent::run_process(spec);
    result.sandbox = "recording";
    result.confined = false;
    if (result.timed_out) result.limits_hit.push_back(cuda_agent::LimitKind::wall_time);
    return result;
  }

  /// Every command run so far (shared between copies of this sandbox).
  [[nodiscard]] std::vector<std::vector<std::string>> commands() const {
    const std::lock_guard lock(log_->mutex);
    return log_->commands;
  }

 private:
  std::shared_ptr<Log> log_;
  std::optional<UserIdentity> identity_;
};

static_assert(cuda_agent::Sandbox<RecordingSandbox>);

}  // namespace cuda_agent::testing
