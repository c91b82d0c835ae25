// SPDX-License-Identifier: Apache-2.0
// BubblewrapSandbox beyond the escapes: what a command sees, how results report exits
// and limits, and how set-up problems become SandboxErrors with reasons.
#include "catch.hpp"
#include "sandbox_test_support.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ca::testing::ScratchDirectory;
using ca::testing::shell;

TEST_CASE("commands run confined: own namespaces, no privileges, no nested user namespaces", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-confined");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::BubblewrapSandbox sandbox(options);
  const auto result =
      sandbox.run(shell("echo \"cwd $(pwd)\"; echo \"host $(cat /proc/sys/kernel/hostname)\"; echo \"pids $(ls -d "
                        "/proc/[0-9]* | wc -l)\";"
                        "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status;"
                        "unshare -U true 2>/dev/null; echo \"STATUS userns $?\"; ls /dev"));
  INFO(result.standard_output.text);
  REQUIRE(result.succeeded());
  CHECK(result.confined);
  CHECK(result.sandbox == "bubblewrap");
  const std::string& out = result.standard_output.text;
  CHECK_THAT(out, Catch::Matchers::Contains("cwd " + options.workspace.string() + "\n"));
  CHECK_THAT(out, Catch::Matchers::Contains("host sandbox\n"));
  CHECK_THAT(out, Catch::Matchers::Contains("CapEff:\t0000000000000000"));
  CHECK_THAT(out, Catch::Matchers::Contains("NoNewPrivs:\t1"));
  CHECK_THAT(out, Catch::Matchers::Contains("Seccomp:\t2"));
  CHECK(out.find("STATUS userns 0") == std::string::npos);
  // Only the sandbox's own processes are visible (init, bash, and the pipeline).
  const auto pids = std::stoi(out.substr(out.find("pids ") + 5));
  CHECK(pids < 8);
  CHECK(out.find("nvidia") == std::string::npos);
  CHECK(out.find("sda") == std::string::npos);
}

TEST_CASE("the environment holds only the allowlist, the fixed variables and the command's own", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-environment");
  ::setenv("CUDA_AGENT_TEST_SECRET", "hunter2", 1);
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::BubblewrapSandbox sandbox(options);
  ca::Command command = shell("env | sort");
  command.environment.set("CUDA_AGENT_COMMAND_VARIABLE", "given");
  const auto result = sandbox.run(command);
  ::unsetenv("CUDA_AGENT_TEST_SECRET");
  const std::string& out = result.standard_output.text;
  CHECK(out.find("hunter2") == std::string::npos);
  CHECK_THAT(out, Catch::Matchers::Contains("HOME=/tmp\n"));
  CHECK_THAT(out, Catch::Matchers::Contains("PYTHONDONTWRITEBYTECODE=1\n"));
  CHECK_THAT(out, Catch::Matchers::Contains("CUDA_AGENT_COMMAND_VARIABLE=given\n"));
  if (const char* path = std::getenv("PATH")) CHECK_THAT(out, Catch::Matchers::Contains(std::string("PATH=") + path));
}

TEST_CASE("exit codes, signals, deadlines and rlimits are reported", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-report");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));

  const auto exited = sandbox.run(shell("echo out; echo err >&2; exit 3"));
  CHECK(exited.exit_code == 3);
  CHECK(exited.standard_output.text == "out\nerr\n");
  CHECK(exited.limits_hit.empty());

  ca::Command separate = shell("echo out; echo err >&2");
  separate.merge_stderr = false;
  const auto separated = sandbox.run(separate);
  CHECK(separated.standard_output.text == "out\n");
  CHECK(separated.standard_error.text == "err\n");

  ca::Command input;
  input.argv = {"cat"};
  input.stdin_data = "through stdin";
  CHECK(sandbox.run(input).standard_output.text == "through stdin");

  // bubblewrap reports a command killed by signal N as 128 + N.
  CHECK(sandbox.run(shell("kill -SEGV $$")).exit_code == 128 + SIGSEGV);

  ca::Command spin = shell("while :; do :; done", 10s);
  spin.limits.cpu_time = 1s;
  const auto spun = sandbox.run(spin);
  CHECK(spun.exit_code == 128 + SIGXCPU);
  CHECK(spun.hit(ca::LimitKind::cpu_time));
  CHECK_FALSE(spun.timed_out);

  ca::Command descriptors = shell("ulimit -n; ulimit -c");
  descriptors.limits.open_files = 64;
  CHECK(sandbox.run(descriptors).standard_output.text == "64\n0\n");

  const auto late = sandbox.run(shell("sleep 5", 200ms));
  CHECK(late.timed_out);
  CHECK(late.signal == SIGTERM);  // bubblewrap itself, which takes the namespace down
  CHECK(late.hit(ca::LimitKind::wall_time));

  const ca::LimitStatus* wall = ca::testing::find_status(late, ca::LimitKind::wall_time);
  REQUIRE(wall != nullptr);
  CHECK(wall->enforced);
  CHECK(wall->mechanism == "timer, PID namespace");
}

TEST_CASE("CPU time is the command's, taken from its cgroup", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-cpu-time");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  const auto busy = sandbox.run(shell("while :; do :; done", 1s));
  const auto used = busy.user_cpu_time + busy.system_cpu_time;
  if (sandbox.cgroup_parent()) {
    CHECK(used > 200ms);  // a second of wall time, on a machine others share
    CHECK(used < busy.wall_time + 1s);
  } else {
    CHECK(used.count() == 0);  // unknown: the command's usage never reaches this process
  }
}

TEST_CASE("a missing program is the command's failure, not the sandbox's", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-missing-program");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  ca::Command command;
  command.argv = {"cuda-agent-no-such-program"};
  const auto result = sandbox.run(command);
  CHECK(result.exit_code == 127);
  CHECK_THAT(result.standard_output.text, Catch::Matchers::Contains("cuda-agent-no-such-program"));
}

TEST_CASE("cancellation stops a running command", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-cancel");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  std::stop_source stop;
  ca::Command command = shell("sleep 30", 60s);
  command.cancellation = stop.get_token();
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    stop.request_stop();
  });
  const auto result = sandbox.run(command);
  canceller.join();
  CHECK(result.cancelled);
  CHECK(result.wall_time < 5s);
}

TEST_CASE("sandboxes run side by side", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-parallel");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  std::vector<std::string> outputs(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    threads.emplace_back([&, i] { outputs[i] = sandbox.run(shell("echo " + std::to_string(i))).standard_output.text; });
  for (auto& thread : threads) thread.join();
  for (std::size_t i = 0; i < outputs.size(); ++i) CHECK(outputs[i] == std::to_string(i) + "\n");
}

TEST_CASE("the seccomp filter refuses risky syscalls and can be switched off", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  if (!ca::testing::python_installed()) CUDA_AGENT_SKIP("python3 is not installed");
  ScratchDirectory scratch("bwrap-seccomp");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::Command command;
  // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0) and io_uring_setup(0, NULL).
  command.argv = {"python3", "-c",
                  "import ctypes, errno\n"
                  "libc = ctypes.CDLL(None, use_errno=True)\n"
                  "for name, number, args in (('keyctl', " +
                      std::to_string(SYS_keyctl) +
                      ", (0, -3, 0)), "
                      "('io_uring_setup', " +
                      std::to_string(SYS_io_uring_setup) +
                      ", (0, None))):\n"
                      "    result = libc.syscall(number, *args)\n"
                      "    print(name, 'EPERM' if result == -1 and ctypes.get_errno() == errno.EPERM else 'other')\n"};
  ca::BubblewrapSandbox filtered(options);
  CHECK(filtered.run(command).standard_output.text == "keyctl EPERM\nio_uring_setup EPERM\n");
  options.syscall_filter = false;
  ca::BubblewrapSandbox unfiltered(options);
  CHECK(unfiltered.run(command).standard_output.text.find("keyctl other") != std::string::npos);
}

TEST_CASE("a read-only workspace can be read but not written", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-read-only");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::testing::write_file(options.workspace / "model_new.py", "candidate\n");
  options.read_only_workspace = true;
  ca::BubblewrapSandbox sandbox(options);
  const auto result = sandbox.run(shell("cat model_new.py; echo x > other.txt"));
  CHECK(result.standard_output.text.rfind("candidate\n", 0) == 0);
  CHECK_FALSE(result.succeeded());
  CHECK_FALSE(fs::exists(options.workspace / "other.txt"));
}

TEST_CASE("set-up problems are SandboxErrors that say what to do", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-errors");
  const ca::SandboxOptions good = ca::testing::workspace_options(scratch);
  using Catch::Matchers::Contains;

  SECTION("no workspace") {
    ca::SandboxOptions options = good;
    options.workspace = scratch.path() / "missing";
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("is not a directory"));
  }
  SECTION("root inside the sandbox") {
    ca::SandboxOptions options = good;
    options.uid = 0;
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("refusing to run sandboxed commands as uid or gid 0"));
  }
  SECTION("no bubblewrap") {
    ca::SandboxOptions options = good;
    options.bubblewrap = "/nonexistent/bwrap";
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("apt-get install bubblewrap"));
    CHECK_THROWS_WITH(ca::make_default_sandbox(options), Contains("constructs ProcessSandbox explicitly"));
  }
  SECTION("a protected path outside the workspace") {
    ca::SandboxOptions options = good;
    options.protected_paths = {"/etc/passwd"};
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("is not inside the workspace"));
  }
  SECTION("a protected path that disappeared") {
    ca::SandboxOptions options = good;
    options.protected_paths = {"later.txt"};
    ca::BubblewrapSandbox sandbox(options);
    CHECK_THROWS_WITH(sandbox.run(shell("true")), Contains("does not exist"));
  }
  SECTION("a missing mount source") {
    ca::SandboxOptions options = good;
    options.mounts.push_back({scratch.path() / "missing", "/opt/missing", ca::Mount::Access::read_only});
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("does not exist"));
    options.mounts.back().optional = true;
    ca::BubblewrapSandbox sandbox(options);
    CHECK(sandbox.run(shell("true")).succeeded());
  }
  SECTION("a mount destination the read-only root cannot hold") {
    ca::SandboxOptions options = good;
    options.mounts.push_back({scratch.path(), "/cuda-agent-no-such-directory", ca::Mount::Access::read_only});
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("under /tmp or under the workspace"));
    options.mounts.back().destination = "/tmp/cuda-agent-mounted";
    ca::BubblewrapSandbox sandbox(options);
    CHECK(sandbox.run(shell("test -d /tmp/cuda-agent-mounted/ws")).succeeded());
  }
  SECTION("a GPU the host does not have") {
    ca::SandboxOptions options = good;
    options.gpus = {97};
    CHECK_THROWS_AS(ca::BubblewrapSandbox(options), ca::SandboxError);
  }
  SECTION("a working directory that does not exist") {
    ca::BubblewrapSandbox sandbox(good);
    ca::Command command = shell("true");
    command.working_directory = "no/such/directory";
    CHECK_THROWS_WITH(sandbox.run(command), Contains("working directory"));
  }
  SECTION("a workspace the sandbox user cannot reach") {
    if (!ca::testing::running_as_root()) CUDA_AGENT_SKIP("needs root: the test makes a directory only root can enter");
    ca::SandboxOptions options = good;
    const fs::path locked = scratch.path() / "locked";
    fs::create_directories(locked / "ws");
    REQUIRE(::chmod(locked.c_str(), 0700) == 0);
    options.workspace = locked / "ws";
    CHECK_THROWS_WITH(ca::BubblewrapSandbox(options), Contains("cannot be searched by uid 65534"));
  }
}

TEST_CASE("make_default_sandbox gives a working bubblewrap sandbox", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-default");
  ca::AnySandbox sandbox = ca::make_default_sandbox(ca::testing::workspace_options(scratch));
  REQUIRE(sandbox.target<ca::BubblewrapSandbox>() != nullptr);
  const auto result = sandbox.run(shell("echo confined"));
  CHECK(result.confined);
  CHECK(result.sandbox == "bubblewrap");
  CHECK(result.standard_output.text == "confined\n");
}

TEST_CASE("results are JSON with every limit and how it was enforced", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-json");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  ca::Command command = shell("true");
  command.limits.cpu_time = 5s;
  const nlohmann::json json = sandbox.run(command);
  CHECK(json["sandbox"] == "bubblewrap");
  CHECK(json["confined"] == true);
  std::vector<std::string> kinds;
  for (const auto& limit : json["limits"]) {
    kinds.push_back(limit["kind"]);
    CHECK_FALSE(limit["mechanism"].get<std::string>().empty());
  }
  CHECK(kinds == std::vector<std::string>{"wall_time", "cpu_time", "file_size", "open_files", "memory", "processes"});
}

TEST_CASE("a workspace reached through a symbolic link keeps its protections", "[sandbox]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("bwrap-linked-workspace");
  const fs::path real = scratch.path() / "real" / "ws";
  ca::testing::write_file(real / "SKILL.md", "rules\n");
  fs::create_directory_symlink(scratch.path() / "real", scratch.path() / "link");
  ca::SandboxOptions options;
  options.workspace = scratch.path() / "link" / "ws";
  options.protected_paths = {scratch.path() / "link" / "ws" / "SKILL.md"};
  ca::hand_over_to_sandbox(options.workspace, options);
  ca::BubblewrapSandbox sandbox(options);
  const auto result = sandbox.run(shell("pwd; echo hacked > SKILL.md; echo \"STATUS $?\"; echo mine > notes.txt"));
  INFO(result.standard_output.text);
  CHECK(result.standard_output.text.rfind(real.string() + "\n", 0) == 0);
  CHECK(result.standard_output.text.find("STATUS 0") == std::string::npos);
  CHECK(ca::testing::read_file(real / "SKILL.md") == "rules\n");
  CHECK(ca::testing::read_file(real / "notes.txt") == "mine\n");
}

TEST_CASE("a host without unprivileged user namespaces gets an explanation, not an unconfined fallback", "[sandbox]") {
  ScratchDirectory scratch("bwrap-no-userns");
  // Stands in for bubblewrap on a host where user namespaces are disabled: it answers
  // --version, then fails the way bubblewrap 0.8 does there.
  const fs::path fake = scratch.path() / "bin" / "bwrap";
  ca::testing::write_file(fake,
                          "#!/bin/sh\n"
                          "if [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\n"
                          "echo 'bwrap: No permissions to creating new namespace, likely because the kernel does not "
                          "allow non-privileged user namespaces.' >&2\n"
                          "exit 1\n");
  fs::permissions(fake, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  ::chmod(fake.parent_path().c_str(), 0755);
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  options.bubblewrap = fake;
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(ca::make_default_sandbox(options),
                    Contains("could not create a user namespace") && Contains("kernel.unprivileged_userns_clone") &&
                        Contains("does not fall back to running commands unconfined"));
}
