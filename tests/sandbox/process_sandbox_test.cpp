// SPDX-License-Identifier: Apache-2.0
// ProcessSandbox: no confinement, but the same identity, limits, deadline and reporting,
// and every result says that it was unconfined.
#include "catch.hpp"
#include "sandbox_test_support.hpp"

#include <cuda_agent/sandbox/process_sandbox.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ca::testing::ScratchDirectory;
using ca::testing::shell;

TEST_CASE("ProcessSandbox runs in the workspace as the sandbox identity and says it is unconfined",
          "[sandbox][process]") {
  ScratchDirectory scratch("process-basics");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::ProcessSandbox sandbox(options);
  const auto result = sandbox.run(shell("pwd; id -u; echo \"$HOME\"; echo x > written.txt"));
  CHECK_FALSE(result.confined);
  CHECK(result.sandbox == "process");
  const auto identity = ca::sandbox_identity(options);
  CHECK(result.standard_output.text == options.workspace.string() + "\n" + std::to_string(identity.uid) + "\n/tmp\n");
  CHECK(fs::exists(options.workspace / "written.txt"));
  CHECK(nlohmann::json(result)["confined"] == false);
}

TEST_CASE("ProcessSandbox enforces rlimits and reports the hits", "[sandbox][process]") {
  ScratchDirectory scratch("process-limits");
  ca::ProcessSandbox sandbox(ca::testing::workspace_options(scratch));

  ca::Command spin = shell("exec sh -c 'while :; do :; done'", 10s);
  spin.limits.cpu_time = 1s;
  const auto spun = sandbox.run(spin);
  CHECK(spun.signal == SIGXCPU);
  CHECK(spun.hit(ca::LimitKind::cpu_time));

  ca::Command big = shell("exec head -c 16M /dev/zero > big.bin");
  big.limits.file_size_bytes = 1 << 20;
  const auto written = sandbox.run(big);
  CHECK(written.signal == SIGXFSZ);
  CHECK(written.hit(ca::LimitKind::file_size));
  CHECK(fs::file_size(sandbox.options().workspace / "big.bin") == 1u << 20);

  ca::Command files = shell("ulimit -n");
  files.limits.open_files = 77;
  const auto listed = sandbox.run(files);
  CHECK(listed.standard_output.text == "77\n");
  const ca::LimitStatus* status = ca::testing::find_status(listed, ca::LimitKind::open_files);
  REQUIRE(status != nullptr);
  CHECK(status->enforced);
  CHECK(status->mechanism == "rlimit RLIMIT_NOFILE");
}

TEST_CASE("ProcessSandbox kills a command that ignores SIGTERM after the grace period", "[sandbox][process]") {
  ScratchDirectory scratch("process-deadline");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  options.kill_grace = 300ms;
  ca::ProcessSandbox sandbox(options);
  const auto result = sandbox.run(shell("trap '' TERM; while true; do sleep 0.05; done", 300ms));
  CHECK(result.timed_out);
  CHECK(result.signal == SIGKILL);
  CHECK(result.hit(ca::LimitKind::wall_time));
  CHECK(result.wall_time >= 600ms);
  CHECK(result.wall_time < 3s);
}

TEST_CASE("ProcessSandbox reports honestly whether detached processes are killed", "[sandbox][process]") {
  ScratchDirectory scratch("process-detach");
  ca::ProcessSandbox sandbox(ca::testing::workspace_options(scratch));
  const std::string marker = ca::testing::unique_marker();
  // Exits once the detached process has left the session (the group kill cannot reach it).
  const auto result = sandbox.run(
      shell("(setsid sh -c 'touch ready; exec sleep " + marker + "' &); while [ ! -e ready ]; do sleep 0.01; done"));
  CHECK(result.succeeded());
  const ca::LimitStatus* wall = ca::testing::find_status(result, ca::LimitKind::wall_time);
  REQUIRE(wall != nullptr);
  const auto survivors = ca::testing::processes_mentioning(marker);
  if (wall->mechanism.find("cgroup.kill") != std::string::npos) {
    CHECK(survivors.empty());
  } else {
    // Without a cgroup nothing tracks a process that left the group, and the result says so.
    CHECK_THAT(wall->note, Catch::Matchers::Contains("are not killed"));
    for (const int pid : survivors) ::kill(pid, SIGKILL);
  }
}

TEST_CASE("ProcessSandbox reports a missing program as exit code 127", "[sandbox][process]") {
  ScratchDirectory scratch("process-missing");
  ca::ProcessSandbox sandbox(ca::testing::workspace_options(scratch));
  ca::Command command;
  command.argv = {"cuda-agent-no-such-program"};
  const auto result = sandbox.run(command);
  CHECK(result.exit_code == 127);
  CHECK_FALSE(result.confined);
  CHECK_THAT(result.standard_output.text, Catch::Matchers::Contains("not found"));
}

TEST_CASE("ProcessSandbox refuses identities it cannot take", "[sandbox][process]") {
  ScratchDirectory scratch("process-identity");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  if (ca::testing::running_as_root()) {
    // Root may choose, and uid 0 is allowed here: ProcessSandbox is for trusted commands.
    options.uid = 0;
    options.gid = 0;
    ca::ProcessSandbox sandbox(options);
    CHECK(sandbox.run(shell("id -u")).standard_output.text == "0\n");
  } else {
    options.uid = ::geteuid() + 1;
    CHECK_THROWS_AS(ca::ProcessSandbox(options), ca::SandboxError);
  }
}
