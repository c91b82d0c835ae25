// SPDX-License-Identifier: Apache-2.0
// The escape suite: what untrusted commands try, run under BubblewrapSandbox. Each attempt
// must be contained, reported in the result, and leave the host (this process, its
// files, its services, its process table) as it was.
#include "catch.hpp"
#include "sandbox_test_support.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/detail/cgroup_v2.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ca::testing::ScratchDirectory;
using ca::testing::shell;

namespace {

/// Every line "name rc" the script printed, as a map from name to exit status.
std::map<std::string, int> statuses(const std::string& output) {
  std::map<std::string, int> result;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string tag, name;
    int code;
    if (words >> tag >> name >> code && tag == "STATUS") result[name] = code;
  }
  return result;
}

/// A listening socket, closed on destruction.
struct Listener {
  ca::detail::UniqueFd fd;
  int port = 0;
};

Listener listen_on_loopback() {
  Listener listener;
  listener.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(listener.fd);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener.fd.get(), 8) == 0);
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(listener.fd.get(), reinterpret_cast<sockaddr*>(&address), &length) == 0);
  listener.port = ntohs(address.sin_port);
  return listener;
}

}  // namespace

TEST_CASE("a protected harness file cannot be overwritten, moved, deleted, re-permissioned or unmounted",
          "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-protected");
  ca::SandboxOptions options;
  options.workspace = scratch.path() / "ws";
  ca::testing::write_file(options.workspace / "SKILL.md", "the rules\n");
  ca::testing::write_file(options.workspace / "harness" / "verify.py", "print('trusted')\n");
  ca::testing::write_file(options.workspace / "notes.txt", "mine\n");
  options.protected_paths = {"SKILL.md", "harness/verify.py"};
  ca::hand_over_to_sandbox(options.workspace, options);
  ca::BubblewrapSandbox sandbox(options);

  const auto result = sandbox.run(shell(R"SH(
    attempt() { name=$1; shift; "$@" >/dev/null 2>&1; echo "STATUS $name $?"; }
    attempt overwrite sh -c 'echo hacked > SKILL.md'
    attempt append sh -c 'echo hacked >> harness/verify.py'
    attempt truncate truncate -s 0 harness/verify.py
    attempt rename mv SKILL.md SKILL.old
    attempt delete rm -f harness/verify.py
    attempt chmod chmod 0777 SKILL.md
    attempt chown chown 65534 SKILL.md
    attempt unmount umount harness/verify.py
    attempt lazy_unmount umount -l SKILL.md
    attempt move_parent mv harness harness.old
    attempt delete_parent rm -rf harness
    attempt replace_by_link sh -c 'ln -sf /etc/passwd SKILL.md'
    attempt touch touch -d 2001-01-01 SKILL.md
    attempt write_notes sh -c 'echo changed > notes.txt'
    attempt new_file sh -c 'echo new > kernel.cu'
  )SH"));

  INFO(result.standard_output.text);
  REQUIRE(result.confined);
  const auto status = statuses(result.standard_output.text);
  for (const char* forbidden : {"overwrite", "append", "truncate", "rename", "delete", "chmod", "chown", "unmount",
                                "lazy_unmount", "move_parent", "delete_parent", "replace_by_link", "touch"}) {
    INFO(forbidden);
    REQUIRE(status.count(forbidden) == 1);
    CHECK(status.at(forbidden) != 0);
  }
  // The workspace itself stays writable: the protections are not a read-only workspace.
  CHECK(status.at("write_notes") == 0);
  CHECK(status.at("new_file") == 0);

  CHECK(ca::testing::read_file(options.workspace / "SKILL.md") == "the rules\n");
  CHECK(ca::testing::read_file(options.workspace / "harness" / "verify.py") == "print('trusted')\n");
  CHECK(ca::testing::read_file(options.workspace / "notes.txt") == "changed\n");
  CHECK_FALSE(fs::exists(options.workspace / "harness.old"));
  CHECK_FALSE(fs::is_symlink(options.workspace / "SKILL.md"));
  struct stat mode {};
  REQUIRE(::stat((options.workspace / "SKILL.md").c_str(), &mode) == 0);
  CHECK((mode.st_mode & 07777) == 0644);
}

TEST_CASE("a trusted copy mounted over a workspace file is what the command sees", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-trusted-copy");
  ca::testing::write_file(scratch.path() / "trusted" / "verify.py", "trusted\n");
  ca::SandboxOptions options;
  options.workspace = scratch.path() / "ws";
  // The agent's own version, which must not be the one that runs.
  ca::testing::write_file(options.workspace / "harness" / "verify.py", "forged\n");
  options.mounts.push_back({scratch.path() / "trusted" / "verify.py", options.workspace / "harness" / "verify.py",
                            ca::Mount::Access::read_only});
  ca::hand_over_to_sandbox(options.workspace, options);
  ca::BubblewrapSandbox sandbox(options);

  const auto result = sandbox.run(shell("cat harness/verify.py; echo x > harness/verify.py; echo \"STATUS write $?\""));
  CHECK(result.standard_output.text.find("trusted\n") == 0);
  CHECK(statuses(result.standard_output.text).at("write") != 0);
  CHECK(ca::testing::read_file(scratch.path() / "trusted" / "verify.py") == "trusted\n");
}

TEST_CASE("a workspace tampered with through a symbolic link stops the sandbox instead of losing a protection",
          "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-link");
  ca::SandboxOptions options;
  options.workspace = scratch.path() / "ws";
  ca::testing::write_file(options.workspace / "harness" / "verify.py", "trusted\n");
  options.protected_paths = {"harness/verify.py"};
  ca::hand_over_to_sandbox(options.workspace, options);
  ca::BubblewrapSandbox sandbox(options);
  CHECK(sandbox.run(shell("true")).succeeded());

  // What a command could leave behind if the directory were not pinned: the protected
  // path now leads through a link to a file the command controls.
  fs::rename(options.workspace / "harness", options.workspace / "moved");
  ca::testing::write_file(scratch.path() / "elsewhere" / "verify.py", "forged\n");
  fs::create_directory_symlink(scratch.path() / "elsewhere", options.workspace / "harness");
  CHECK_THROWS_WITH(sandbox.run(shell("true")), Catch::Matchers::Contains("symbolic link"));
}

TEST_CASE("writes outside the workspace never reach the host", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-outside");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::BubblewrapSandbox sandbox(options);
  const std::string marker = ca::testing::unique_marker();
  const fs::path sibling = scratch.path() / ("outside-" + marker);
  const fs::path host_tmp = fs::path("/tmp") / ("cuda-agent-escape-" + marker);

  const auto result =
      sandbox.run(shell("attempt() { name=$1; shift; \"$@\" >/dev/null 2>&1; echo \"STATUS $name $?\"; }\n"
                        "attempt etc sh -c 'echo x > /etc/cuda-agent-" +
                        marker +
                        "'\n"
                        "attempt usr sh -c 'echo x > /usr/local/cuda-agent-" +
                        marker +
                        "'\n"
                        "attempt dev sh -c 'echo x > /dev/cuda-agent-" +
                        marker +
                        "'\n"
                        "attempt var_tmp sh -c 'echo x > /var/tmp/cuda-agent-" +
                        marker +
                        "'\n"
                        "attempt root sh -c 'echo x > /root/cuda-agent-" +
                        marker +
                        "'\n"
                        "attempt sibling sh -c 'echo x > " +
                        sibling.string() +
                        "'\n"
                        "attempt tmp sh -c 'echo x > " +
                        host_tmp.string() + "'\n"));
  INFO(result.standard_output.text);
  const auto status = statuses(result.standard_output.text);
  for (const char* read_only : {"etc", "usr", "dev", "var_tmp", "root"}) {
    INFO(read_only);
    CHECK(status.at(read_only) != 0);
  }
  // /tmp, the workspace's parent included, is the sandbox's own tmpfs: writing there
  // succeeds and vanishes with the sandbox.
  CHECK(status.at("tmp") == 0);
  for (const fs::path& host_path :
       {fs::path("/etc/cuda-agent-" + marker), fs::path("/usr/local/cuda-agent-" + marker),
        fs::path("/var/tmp/cuda-agent-" + marker), fs::path("/root/cuda-agent-" + marker), sibling, host_tmp}) {
    INFO(host_path);
    std::error_code unreadable;  // /root, when this test does not run as root
    CHECK_FALSE(fs::exists(host_path, unreadable));
  }
}

TEST_CASE("services on the host's loopback and sockets in /run are unreachable without network", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-network");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  const Listener listener = listen_on_loopback();
  const std::string connect = "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(listener.port) + " && echo CONNECTED";

  ca::BubblewrapSandbox isolated(options);
  const auto refused = isolated.run(shell(connect));
  CHECK(refused.standard_output.text.find("CONNECTED") == std::string::npos);
  CHECK_FALSE(refused.succeeded());

  // The same command with the network kept: proves the listener and the probe work.
  options.network = true;
  ca::BubblewrapSandbox networked(options);
  CHECK(networked.run(shell(connect)).standard_output.text.find("CONNECTED") != std::string::npos);

  // Filesystem sockets are not covered by the network namespace; /run is hidden instead.
  if (ca::testing::running_as_root() && fs::is_directory("/run")) {
    const fs::path socket_path = fs::path("/run") / ("cuda-agent-test-" + ca::testing::unique_marker() + ".sock");
    ca::detail::UniqueFd unix_socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
    REQUIRE(::bind(unix_socket.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(unix_socket.get(), 1) == 0);
    ::chmod(socket_path.c_str(), 0777);
    const auto hidden = isolated.run(shell("test -S " + socket_path.string() + " && echo VISIBLE; ls -A /run"));
    ::unlink(socket_path.c_str());
    CHECK(hidden.standard_output.text.find("VISIBLE") == std::string::npos);
  }
}

TEST_CASE("a root-only file of the host cannot be read from a sandbox started by root", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  if (!ca::testing::running_as_root()) CUDA_AGENT_SKIP("needs root: the test creates a root-owned 0600 file");
  ScratchDirectory scratch("escape-secret");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  // Inside the workspace, so that it is visible: only the uid drop protects it.
  const fs::path secret = options.workspace / "secret.txt";
  ca::testing::write_file(secret, "topsecret-" + ca::testing::unique_marker());
  REQUIRE(::chown(secret.c_str(), 0, 0) == 0);
  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  ca::BubblewrapSandbox sandbox(options);

  const auto result = sandbox.run(shell("id -u; cat secret.txt; echo \"STATUS cat $?\"; ls -A /root | wc -l"));
  INFO(result.standard_output.text);
  CHECK(result.standard_output.text.find("topsecret") == std::string::npos);
  CHECK(statuses(result.standard_output.text).at("cat") != 0);
  CHECK(result.standard_output.text.rfind("65534\n", 0) == 0);
  CHECK(result.standard_output.text.find("Permission denied") != std::string::npos);
}

TEST_CASE("a fork bomb is contained and leaves nothing behind", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-forkbomb");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  if (ca::testing::running_as_root()) {
    // RLIMIT_NPROC counts every process of the uid on the host, so the bomb gets a uid of its own:
    // the other sandbox tests, which ctest runs alongside, would otherwise share its budget and
    // make both the bomb's start and theirs depend on timing.
    std::random_device random;
    options.uid = static_cast<uid_t>(60000 + random() % 4000);
    ca::hand_over_to_sandbox(options.workspace, options);
  }
  ca::BubblewrapSandbox sandbox(options);
  const std::string marker = ca::testing::unique_marker();
  const auto others = ca::testing::threads_of_uid(ca::sandbox_identity(options).uid);
  // The launching shell stays alive: were it to return at once, the PID namespace would tear the bomb
  // down before it ever reached a limit, and the test would show nothing.
  ca::Command bomb = shell(": " + marker + "; bomb() { bomb | bomb & }; bomb; sleep 2", 4s);
  bomb.limits.processes = static_cast<std::uint64_t>(others + 64);

  const auto started = std::chrono::steady_clock::now();
  const auto result = sandbox.run(bomb);
  CHECK(std::chrono::steady_clock::now() - started < 15s);
  CHECK(ca::testing::processes_mentioning(marker).empty());
  const ca::LimitStatus* processes = ca::testing::find_status(result, ca::LimitKind::processes);
  REQUIRE(processes != nullptr);
  CHECK(processes->enforced);
  INFO(result.standard_output.text.substr(0, 2000));
  if (processes->mechanism.find("cgroup") != std::string::npos)
    CHECK(result.hit(ca::LimitKind::processes));
  else  // RLIMIT_NPROC: the bomb ran into it (fork fails with EAGAIN)
    CHECK_THAT(result.standard_output.text, Catch::Matchers::Contains("Resource temporarily unavailable"));
  // The host can still start processes.
  CHECK(sandbox.run(shell("echo alive")).standard_output.text == "alive\n");
}

TEST_CASE("filling the disk stops at the sandbox's limits", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-disk");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  options.tmp_size_bytes = 8 << 20;
  options.shm_size_bytes = 4 << 20;
  options.default_limits.file_size_bytes = 4 << 20;
  ca::BubblewrapSandbox sandbox(options);

  const auto scratch_space = sandbox.run(shell(R"SH(
    head -c 64M /dev/zero > /tmp/fill 2>/dev/null; echo "STATUS tmp $?"
    head -c 64M /dev/zero > /dev/shm/fill 2>/dev/null; echo "STATUS shm $?"
    head -c 1M /dev/zero > /dev/fill 2>/dev/null; echo "STATUS dev $?"
    echo "SIZE tmp $(stat -c %s /tmp/fill)"; echo "SIZE shm $(stat -c %s /dev/shm/fill)"
  )SH"));
  INFO(scratch_space.standard_output.text);
  const auto status = statuses(scratch_space.standard_output.text);
  CHECK(status.at("tmp") != 0);  // No space left on device
  CHECK(status.at("shm") != 0);
  CHECK(status.at("dev") != 0);                                                          // read-only
  CHECK(scratch_space.standard_output.text.find("No space left") == std::string::npos);  // stderr went to /dev/null

  const auto one_big_file = sandbox.run(shell("head -c 64M /dev/zero > big.bin"));
  CHECK(one_big_file.hit(ca::LimitKind::file_size));
  CHECK(one_big_file.exit_code == 128 + SIGXFSZ);
  CHECK(fs::file_size(options.workspace / "big.bin") == 4u << 20);

  // What is not bounded, said in the result rather than hidden.
  const ca::LimitStatus* file_size = ca::testing::find_status(one_big_file, ca::LimitKind::file_size);
  REQUIRE(file_size != nullptr);
  CHECK_THAT(file_size->note, Catch::Matchers::Contains("workspace's total size is bounded only by the filesystem"));
}

TEST_CASE("printing gigabytes costs the host a bounded buffer", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-output");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  ca::Command flood = shell("cat /dev/zero", 1500ms);
  flood.output_limit = 64 * 1024;
  const long before = ca::testing::resident_kib();
  const auto result = sandbox.run(flood);
  CHECK(result.timed_out);
  CHECK(result.standard_output.total_bytes > (16u << 20));
  CHECK(result.standard_output.text.size() < 64 * 1024 + 256);
  CHECK(result.standard_output.truncated());
  CHECK(ca::testing::resident_kib() - before < 64 * 1024);
}

TEST_CASE("a command that ignores SIGTERM, or sleeps forever, ends at the deadline", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-deadline");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  const std::string marker = ca::testing::unique_marker();

  for (const std::string& script :
       {"trap '' TERM; while true; do sleep 0.05; done; : " + marker, "exec sleep " + marker}) {
    INFO(script);
    const auto result = sandbox.run(shell(script, 400ms));
    CHECK(result.timed_out);
    CHECK(result.hit(ca::LimitKind::wall_time));
    CHECK(result.wall_time >= 400ms);
    CHECK(result.wall_time < 3s);
    CHECK(ca::testing::processes_mentioning(marker).empty());
  }
}

TEST_CASE("processes that detach with setsid or a double fork do not outlive the command", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  ScratchDirectory scratch("escape-detach");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  const std::string marker = ca::testing::unique_marker();

  // The command exits as soon as its daemons are running, detached.
  // It waits until the three have exec'd their sleep, so that the listing shows them.
  const auto detached = sandbox.run(shell("m=" + marker +
                                          "\n"
                                          "(setsid sh -c \"exec sleep $m\" &); (sh -c \"exec sleep $m\" &); nohup sh "
                                          "-c \"exec sleep $m\" >/dev/null 2>&1 &\n"
                                          "n=0; while [ $n -lt 3 ]; do n=0; sleep 0.01\n"
                                          "  for p in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' 2>/dev/null < $p/cmdline)\" "
                                          "= \"sleep $m \" ] && n=$((n+1)); done\n"
                                          "done\n"
                                          "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"));
  INFO(detached.standard_output.text);
  // The three were running when the command ended ...
  const std::string listing = "\n" + detached.standard_output.text;
  std::size_t running = 0;
  for (auto at = listing.find("\nsleep " + marker); at != std::string::npos;
       at = listing.find("\nsleep " + marker, at + 1))
    ++running;
  CHECK(running == 3);
  CHECK(detached.succeeded());
  // ... and are gone when run() returns.
  CHECK(ca::testing::processes_mentioning(marker).empty());

  // The same, still running at the deadline, with SIGTERM ignored.
  const auto timed = sandbox.run(
      shell("setsid bash -c \"trap '' TERM; sleep " + marker + "\" & (trap '' TERM; sleep " + marker + ")", 400ms));
  CHECK(timed.timed_out);
  CHECK(ca::testing::processes_mentioning(marker).empty());
}

TEST_CASE("exhausting memory is contained, and the result says by what", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  if (!ca::testing::python_installed()) CUDA_AGENT_SKIP("python3 is not installed");
  ScratchDirectory scratch("escape-memory");
  ca::BubblewrapSandbox sandbox(ca::testing::workspace_options(scratch));
  ca::Command hog;
  hog.argv = {"python3", "-c",
              "chunks = []\n"
              "for i in range(64):\n"
              "    chunks.append(bytearray(64 << 20))\n"
              "    print(i, flush=True)\n"};
  hog.timeout = 30s;
  hog.limits.memory_bytes = 256u << 20;
  const auto result = sandbox.run(hog);
  INFO(result.standard_output.text);
  CHECK_FALSE(result.succeeded());
  // Never more than the limit's worth of 64 MiB chunks was allocated.
  CHECK(result.standard_output.text.find("\n4\n") == std::string::npos);

  const ca::LimitStatus* memory = ca::testing::find_status(result, ca::LimitKind::memory);
  REQUIRE(memory != nullptr);
  if (memory->mechanism.find("cgroup") != std::string::npos) {
    CHECK(memory->enforced);
    CHECK(result.hit(ca::LimitKind::memory));
  } else {
    // Without a cgroup v2 memory controller, RLIMIT_DATA stops each process's private
    // allocations; the result does not pretend that this is a memory limit.
    CHECK_FALSE(memory->enforced);
    CHECK_THAT(memory->mechanism, Catch::Matchers::Contains("RLIMIT_DATA"));
    CHECK_THAT(memory->note, Catch::Matchers::Contains("shared memory"));
    CHECK_THAT(result.standard_output.text, Catch::Matchers::Contains("MemoryError"));
  }
}

TEST_CASE("under a cgroup v2 parent, memory and processes are bounded for the whole command", "[sandbox][escape]") {
  CUDA_AGENT_REQUIRE_BUBBLEWRAP();
  if (!ca::testing::running_as_root()) CUDA_AGENT_SKIP("needs root to create a cgroup");
  std::ifstream mountinfo("/proc/self/mountinfo");
  const auto hierarchy = ca::detail::find_cgroup2_mount(mountinfo);
  if (!hierarchy) CUDA_AGENT_SKIP("no cgroup v2 hierarchy is mounted");
  const std::string offered = ca::detail::read_cgroup_line(*hierarchy / "cgroup.controllers");
  if (!ca::detail::has_word(offered, "memory") || !ca::detail::has_word(offered, "pids"))
    CUDA_AGENT_SKIP("the cgroup v2 hierarchy at " + hierarchy->string() +
                    " offers no memory or pids controller (a cgroup v1 or hybrid host)");
  for (const char* controller : {"+memory", "+pids"})
    if (!ca::detail::has_word(ca::detail::read_cgroup_line(*hierarchy / "cgroup.subtree_control"), controller + 1) &&
        !ca::detail::write_cgroup_file(*hierarchy / "cgroup.subtree_control", controller))
      CUDA_AGENT_SKIP("cannot enable the controllers below " + hierarchy->string());

  ScratchDirectory scratch("escape-cgroup");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  const fs::path parent = *hierarchy / ("cuda-agent-test-" + ca::testing::unique_marker());
  options.cgroup_parent = parent;
  options.shm_size_bytes = 512u << 20;
  options.default_limits.memory_bytes = 128u << 20;
  options.default_limits.processes = 32;
  {
    ca::BubblewrapSandbox sandbox(options);
    CHECK(sandbox.cgroup_limitations().empty());

    // Shared memory is what RLIMIT_DATA cannot bound; tmpfs pages count against memory.max.
    const auto shared = sandbox.run(shell("head -c 400M /dev/zero > /dev/shm/fill; echo survived"));
    CHECK(shared.hit(ca::LimitKind::memory));
    CHECK(shared.standard_output.text.find("survived") == std::string::npos);
    const ca::LimitStatus* memory = ca::testing::find_status(shared, ca::LimitKind::memory);
    REQUIRE(memory != nullptr);
    CHECK(memory->enforced);
    CHECK(memory->mechanism == "cgroup v2 memory.max");

    const std::string marker = ca::testing::unique_marker();
    const auto bomb = sandbox.run(shell(": " + marker + "; bomb() { bomb | bomb & }; bomb; sleep 2", 4s));
    CHECK(bomb.hit(ca::LimitKind::processes));
    CHECK(ca::testing::processes_mentioning(marker).empty());
    CHECK(sandbox.run(shell("echo alive")).standard_output.text == "alive\n");
  }
  CHECK(::rmdir(parent.c_str()) == 0);
}
