// SPDX-License-Identifier: Apache-2.0
// The sandbox's parts on their own: the bubblewrap command line, limit planning and hit
// detection, cgroup v2 parsing and leaves, GPU device nodes, the seccomp program,
// hand_over_to_sandbox.
#include "catch.hpp"
#include "sandbox_test_support.hpp"

#include <cuda_agent/detail/ownership.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/detail/bwrap_arguments.hpp>
#include <cuda_agent/sandbox/detail/cgroup_v2.hpp>
#include <cuda_agent/sandbox/detail/nvidia_devices.hpp>
#include <cuda_agent/sandbox/detail/sandbox_runtime.hpp>
#include <cuda_agent/sandbox/detail/seccomp_filter.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ca::testing::ScratchDirectory;
using Catch::Matchers::Contains;

namespace {

std::ptrdiff_t position(const std::vector<std::string>& args, const std::vector<std::string>& sequence) {
  const auto found = std::search(args.begin(), args.end(), sequence.begin(), sequence.end());
  return found == args.end() ? -1 : found - args.begin();
}

}  // namespace

TEST_CASE("the bubblewrap command line stacks each protection after what it narrows", "[sandbox][internals]") {
  ca::detail::BwrapLayout layout;
  layout.workspace = "/tmp/ws";
  layout.protected_paths = {"/tmp/ws/SKILL.md", "/tmp/ws/harness/verify.py"};
  layout.anchors = {"/tmp/ws/harness"};
  layout.mounts = {{"/opt/venv", "/opt/venv", ca::Mount::Access::read_only, false},
                   {"/var/cache/x", "/tmp/ws/.cache", ca::Mount::Access::read_write, true}};
  layout.hidden_directories = {"/home", "/run"};
  layout.hidden_files = {"/etc/secret"};
  layout.gpu_nodes = {{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"}, {"/dev/nvidia-uvm-tools"}};
  layout.tmp_size_bytes = 1000;
  layout.shm_size_bytes = 500;
  layout.hostname = "sandbox";
  const auto args = ca::detail::bwrap_arguments(layout, {7, 8, 9}, "/tmp/ws/kernels", {"nvcc", "--version"});

  for (const std::vector<std::string>& expected : {std::vector<std::string>{"--unshare-all"},
                                                   {"--unshare-user", "--disable-userns"},
                                                   {"--die-with-parent"},
                                                   {"--new-session"},
                                                   {"--cap-drop", "ALL"},
                                                   {"--json-status-fd", "7"},
                                                   {"--block-fd", "8"},
                                                   {"--add-seccomp-fd", "9"}})
    CHECK(position(args, expected) >= 0);
  CHECK(position(args, {"--share-net"}) < 0);

  const auto root = position(args, {"--ro-bind", "/", "/"});
  const auto dev = position(args, {"--dev", "/dev"});
  const auto shm = position(args, {"--size", "500", "--tmpfs", "/dev/shm"});
  const auto gpu = position(args, {"--dev-bind", "/dev/nvidia1", "/dev/nvidia1"});
  const auto uvm_tools = position(args, {"--dev-bind-try", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools"});
  const auto dev_read_only = position(args, {"--remount-ro", "/dev"});
  const auto tmp = position(args, {"--size", "1000", "--tmpfs", "/tmp"});
  const auto home = position(args, {"--tmpfs", "/home"});
  const auto secret = position(args, {"--ro-bind", "/dev/null", "/etc/secret"});
  const auto workspace = position(args, {"--bind", "/tmp/ws", "/tmp/ws"});
  const auto anchor = position(args, {"--bind", "/tmp/ws/harness", "/tmp/ws/harness"});
  const auto harness = position(args, {"--ro-bind", "/tmp/ws/harness/verify.py", "/tmp/ws/harness/verify.py"});
  const auto venv = position(args, {"--ro-bind", "/opt/venv", "/opt/venv"});
  const auto cache = position(args, {"--bind-try", "/var/cache/x", "/tmp/ws/.cache"});
  const auto home_read_only = position(args, {"--remount-ro", "/home"});
  const auto chdir = position(args, {"--chdir", "/tmp/ws/kernels", "--", "nvcc", "--version"});
  for (const auto index : {root, dev, shm, gpu, uvm_tools, dev_read_only, tmp, home, secret, workspace, anchor, harness,
                           venv, cache, home_read_only, chdir})
    CHECK(index >= 0);
  CHECK(root < dev);
  CHECK(dev < shm);
  CHECK(shm < gpu);
  CHECK(gpu < dev_read_only);
  CHECK(uvm_tools < dev_read_only);
  CHECK(tmp < workspace);  // a workspace under /tmp is bound into the private /tmp
  CHECK(home < workspace);
  CHECK(workspace < anchor);
  CHECK(anchor < harness);
  CHECK(harness < venv);
  CHECK(venv < cache);
  CHECK(cache < home_read_only);
  CHECK(chdir == static_cast<std::ptrdiff_t>(args.size()) - 5);
  CHECK(secret > home);

  layout.network = true;
  layout.read_only_workspace = true;
  const auto open = ca::detail::bwrap_arguments(layout, {}, "/tmp/ws", {"true"});
  CHECK(position(open, {"--share-net"}) >= 0);
  CHECK(position(open, {"--ro-bind", "/tmp/ws", "/tmp/ws"}) >= 0);
  CHECK(position(open, {"--json-status-fd"}) < 0);
}

TEST_CASE("the layout validates paths and pins the parents of protected files", "[sandbox][internals]") {
  ScratchDirectory scratch("layout");
  ca::SandboxOptions options = ca::testing::workspace_options(scratch);
  ca::testing::write_file(options.workspace / "a" / "b" / "c.py", "x");
  ca::testing::write_file(options.workspace / "top.md", "x");
  options.protected_paths = {"a/b/c.py", options.workspace / "top.md", "a/b/../b/c.py"};
  options.hidden_paths = {"/nonexistent-hidden", "/etc/hostname", "/etc/ssl"};
  const auto layout = ca::detail::make_bwrap_layout(options, ca::sandbox_identity(options));
  CHECK(layout.anchors == std::vector<fs::path>{options.workspace / "a", options.workspace / "a" / "b"});
  CHECK(layout.protected_paths.front() == options.workspace / "a" / "b" / "c.py");
  CHECK(layout.protected_paths.back() == options.workspace / "a" / "b" / "c.py");
  if (fs::is_regular_file("/etc/hostname")) CHECK(layout.hidden_files == std::vector<fs::path>{"/etc/hostname"});
  CHECK(std::find(layout.hidden_directories.begin(), layout.hidden_directories.end(), "/nonexistent-hidden") ==
        layout.hidden_directories.end());

  options.protected_paths = {"../escape.txt"};
  CHECK_THROWS_WITH(ca::detail::make_bwrap_layout(options, ca::sandbox_identity(options)),
                    Contains("not inside the workspace"));
  options.protected_paths = {};
  options.mounts = {{"/etc", "relative/destination", ca::Mount::Access::read_only, false}};
  CHECK_THROWS_WITH(ca::detail::make_bwrap_layout(options, ca::sandbox_identity(options)),
                    Contains("not an absolute path"));
  options.mounts = {{"/etc/hostname", options.workspace / "missing-dir" / "file", ca::Mount::Access::read_only, false}};
  CHECK_THROWS_WITH(ca::detail::make_bwrap_layout(options, ca::sandbox_identity(options)),
                    Contains("create it in the workspace"));
}

TEST_CASE("bubblewrap's failures are explained", "[sandbox][internals]") {
  const ca::SandboxIdentity nobody{65534, 65534};
  CHECK_THAT(ca::detail::explain_bwrap_failure(
                 "bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
                 "non-privileged user namespaces.\n",
                 nobody),
             Contains("could not create a user namespace") && Contains("kernel.unprivileged_userns_clone"));
  CHECK_THAT(ca::detail::explain_bwrap_failure("bwrap: setting up uid map: Permission denied\n", nobody),
             Contains("apparmor_restrict_unprivileged_userns"));
  CHECK_THAT(
      ca::detail::explain_bwrap_failure("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n", nobody),
      Contains("systempaths=unconfined"));
  CHECK_THAT(ca::detail::explain_bwrap_failure("bwrap: Creating new namespace failed: Resource temporarily unavailable",
                                               nobody),
             Contains("user namespace"));
  CHECK_THAT(ca::detail::explain_bwrap_failure("bwrap: fork: Resource temporarily unavailable", nobody),
             Contains("RLIMIT_NPROC"));
  CHECK_THAT(ca::detail::explain_bwrap_failure("bwrap: Can't find source path /root/x: Permission denied", nobody),
             Contains("uid 65534 must be able to reach"));
  CHECK(ca::detail::parse_bwrap_version("bubblewrap 0.8.0\n") == std::vector<int>{0, 8, 0});
  CHECK(ca::detail::parse_bwrap_version("bubblewrap 0.11.1") == std::vector<int>{0, 11, 1});
  CHECK(ca::detail::parse_bwrap_version("nonsense").empty());
}

TEST_CASE("limits are planned by the best mechanism available and said so", "[sandbox][internals]") {
  ca::ResourceLimits limits;
  limits.cpu_time = 3s;
  limits.file_size_bytes = 1 << 20;
  limits.open_files = 100;
  limits.memory_bytes = 1u << 30;
  limits.processes = 50;
  ca::detail::LimitContext context;
  context.identity = {65534, 65534};
  context.timeout = 5s;
  context.memory_note = context.processes_note = "no cgroup here";
  context.wall_time_mechanism = "timer";

  const auto has_rlimit = [](const ca::detail::LimitPlan& plan, int resource) {
    return std::any_of(plan.rlimits.begin(), plan.rlimits.end(),
                       [&](const ca::ChildSetup::Limit& limit) { return limit.resource == resource; });
  };
  const auto status = [](const ca::detail::LimitPlan& plan, ca::LimitKind kind) {
    return *std::find_if(plan.statuses.begin(), plan.statuses.end(),
                         [&](const ca::LimitStatus& each) { return each.kind == kind; });
  };

  const auto cpu_only = ca::detail::plan_limits(limits, context);
  CHECK(has_rlimit(cpu_only, RLIMIT_CORE));
  CHECK(has_rlimit(cpu_only, RLIMIT_CPU));
  CHECK(has_rlimit(cpu_only, RLIMIT_DATA));
  CHECK(has_rlimit(cpu_only, RLIMIT_NPROC));
  CHECK_FALSE(has_rlimit(cpu_only, RLIMIT_AS));
  CHECK_FALSE(status(cpu_only, ca::LimitKind::memory).enforced);
  CHECK(status(cpu_only, ca::LimitKind::processes).enforced);
  CHECK_THAT(status(cpu_only, ca::LimitKind::processes).note, Contains("on the whole host"));

  context.gpu = true;
  const auto gpu = ca::detail::plan_limits(limits, context);
  CHECK_FALSE(has_rlimit(gpu, RLIMIT_DATA));
  CHECK_FALSE(has_rlimit(gpu, RLIMIT_AS));
  CHECK_FALSE(status(gpu, ca::LimitKind::memory).enforced);
  CHECK_THAT(status(gpu, ca::LimitKind::memory).note, Contains("RLIMIT_AS breaks CUDA") && Contains("no cgroup here"));

  context.identity = {0, 0};
  const auto root = ca::detail::plan_limits(limits, context);
  CHECK_FALSE(has_rlimit(root, RLIMIT_NPROC));
  CHECK_FALSE(status(root, ca::LimitKind::processes).enforced);

  context.timeout = 0ms;
  CHECK_FALSE(status(ca::detail::plan_limits({}, context), ca::LimitKind::wall_time).enforced);
}

TEST_CASE("limit hits are recognised from signals, counters and the deadline", "[sandbox][internals]") {
  ca::ResourceLimits limits;
  limits.cpu_time = 2s;
  limits.file_size_bytes = 10;
  ca::ProcessResult result;
  CHECK(ca::detail::detect_limit_hits(result, std::nullopt, limits, {}).empty());
  CHECK(ca::detail::detect_limit_hits(result, SIGXCPU, limits, {}) == std::vector{ca::LimitKind::cpu_time});
  CHECK(ca::detail::detect_limit_hits(result, SIGXFSZ, limits, {}) == std::vector{ca::LimitKind::file_size});
  // SIGKILL is a CPU-limit hit only when the CPU time says so.
  CHECK(ca::detail::detect_limit_hits(result, SIGKILL, limits, {}).empty());
  result.user_cpu_time = 3s;
  CHECK(ca::detail::detect_limit_hits(result, SIGKILL, limits, {}) == std::vector{ca::LimitKind::cpu_time});
  result.user_cpu_time = {};
  result.timed_out = true;
  CHECK(ca::detail::detect_limit_hits(result, SIGTERM, limits, {1, 2}) ==
        std::vector{ca::LimitKind::wall_time, ca::LimitKind::memory, ca::LimitKind::processes});
}

TEST_CASE("cgroup v2 locations are read from mountinfo and /proc/self/cgroup", "[sandbox][internals]") {
  std::istringstream hybrid(
      "30 23 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
      "31 30 0:27 / /sys/fs/cgroup/memory rw shared:10 - cgroup cgroup rw,memory\n"
      "41 30 0:38 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw\n");
  CHECK(ca::detail::find_cgroup2_mount(hybrid) == fs::path("/sys/fs/cgroup/unified"));
  std::istringstream escaped("41 30 0:38 / /weird\\040place rw - cgroup2 cgroup2 rw\n");
  CHECK(ca::detail::find_cgroup2_mount(escaped) == fs::path("/weird place"));
  std::istringstream none("31 30 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  CHECK_FALSE(ca::detail::find_cgroup2_mount(none));

  std::istringstream membership("4:memory:/x\n0::/system.slice/agent.service\n");
  CHECK(ca::detail::find_own_cgroup2(membership) == "/system.slice/agent.service");

  ScratchDirectory scratch("cgroup-files");
  ca::testing::write_file(scratch.path() / "memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n");
  CHECK(ca::detail::read_cgroup_counter(scratch.path() / "memory.events", "oom_kill") == 1);
  CHECK(ca::detail::read_cgroup_counter(scratch.path() / "memory.events", "max") == 12);
  CHECK(ca::detail::read_cgroup_counter(scratch.path() / "memory.events", "absent") == 0);

  ca::SandboxOptions options;
  options.cgroup_parent = scratch.path();
  CHECK_THROWS_WITH(ca::detail::discover_cgroup_parent(options.cgroup_parent),
                    Contains("not a directory of a cgroup v2"));
}

TEST_CASE("a cgroup leaf holds a command's whole tree and kills it", "[sandbox][internals]") {
  const ca::detail::CgroupDiscovery discovery = ca::detail::discover_cgroup_parent(std::nullopt);
  if (!discovery.parent) CUDA_AGENT_SKIP("no writable cgroup v2 hierarchy here: " + discovery.reason);
  const std::string marker = ca::testing::unique_marker();
  fs::path directory;
  {
    ca::detail::CgroupLeaf leaf(*discovery.parent, "cuda-agent-test-" + marker, 64u << 20, 32);
    directory = leaf.directory();
    CHECK(fs::is_directory(directory));
    CHECK(leaf.memory_limited() == discovery.parent->memory);
    CHECK(leaf.pids_limited() == discovery.parent->pids);
    ca::ProcessSpec spec;
    // Returns only once the detached process has left the session, so that the process
    // group kill at exit cannot take it down first.
    const fs::path ready = fs::path("/tmp") / ("cuda-agent-ready-" + marker);
    spec.argv = {"/bin/sh", "-c",
                 "(setsid sh -c 'touch " + ready.string() + "; exec sleep " + marker + "' &); while [ ! -e " +
                     ready.string() + " ]; do sleep 0.01; done; rm -f " + ready.string()};
    spec.child.cgroup_procs_fd = leaf.procs_fd();
    CHECK(ca::run_process(spec).succeeded());
    CHECK(leaf.populated());
    CHECK_FALSE(ca::testing::processes_mentioning(marker).empty());
    CHECK(leaf.kill_all(5s));
    CHECK_FALSE(leaf.populated());
    CHECK(ca::testing::processes_mentioning(marker).empty());
  }
  CHECK_FALSE(fs::exists(directory));
}

TEST_CASE("GPU device nodes: the assigned GPUs only, and clear errors", "[sandbox][internals]") {
  CHECK(ca::detail::nvidia_device_nodes({}).required.empty());
  if (!ca::testing::running_as_root()) CUDA_AGENT_SKIP("needs root to create device nodes in a scratch /dev");
  ScratchDirectory scratch("fake-dev");
  const fs::path dev = scratch.path();
  const auto node = [&](const std::string& name, unsigned minor) {
    REQUIRE(::mknod((dev / name).c_str(), S_IFCHR | 0666, makedev(195, minor)) == 0);
  };
  CHECK_THROWS_WITH(ca::detail::nvidia_device_nodes({0}, dev), Contains("NVIDIA kernel driver is not loaded"));
  node("nvidiactl", 255);
  CHECK_THROWS_WITH(ca::detail::nvidia_device_nodes({0}, dev), Contains("nvidia-modprobe -u -c=0"));
  node("nvidia-uvm", 0);
  node("nvidia0", 0);
  node("nvidia1", 1);
  ca::testing::write_file(dev / "nvidia2", "not a device");
  CHECK(ca::detail::nvidia_gpu_minors(dev) == std::vector<int>{0, 1});
  CHECK_THROWS_WITH(ca::detail::nvidia_device_nodes({2}, dev), Contains("this host has GPUs 0, 1"));
  const auto nodes = ca::detail::nvidia_device_nodes({1, 1}, dev);
  CHECK(nodes.required == std::vector<fs::path>{dev / "nvidiactl", dev / "nvidia-uvm", dev / "nvidia1"});
  CHECK(nodes.optional == std::vector<fs::path>{dev / "nvidia-uvm-tools", dev / "nvidia-modeset"});
}

TEST_CASE("the seccomp program checks the architecture first and allows by default", "[sandbox][internals]") {
  const auto program = ca::detail::seccomp_filter_program();
  if (ca::detail::seccomp_native_arch == 0) {
    CHECK(program.empty());
    return;
  }
  REQUIRE(program.size() > 10);
  CHECK(program.front().code == (BPF_LD | BPF_W | BPF_ABS));
  CHECK(program.front().k == offsetof(seccomp_data, arch));
  CHECK(program.back().code == (BPF_RET | BPF_K));
  CHECK(program.back().k == SECCOMP_RET_ALLOW);
  CHECK(ca::detail::seccomp_filter_bytes().size() == program.size() * sizeof(sock_filter));
}

TEST_CASE("hand_over_to_sandbox gives the tree away without following links", "[sandbox][internals]") {
  if (!ca::testing::running_as_root()) CUDA_AGENT_SKIP("needs root: hand_over_to_sandbox only acts as root");
  ScratchDirectory scratch("hand-over");
  const fs::path outside = scratch.path() / "outside.txt";
  ca::testing::write_file(outside, "host file");
  ca::SandboxOptions options;
  options.workspace = scratch.path() / "ws";
  ca::testing::write_file(options.workspace / "kernels" / "a.cu", "x");
  ca::testing::write_file(options.workspace / "model.py", "reference");
  fs::create_symlink(outside, options.workspace / "link");
  fs::create_hard_link(outside, options.workspace / "hard");
  options.protected_paths = {"model.py"};
  ca::hand_over_to_sandbox(options.workspace, options);

  const auto owner = [](const fs::path& path) {
    struct stat status {};
    REQUIRE(::lstat(path.c_str(), &status) == 0);
    return status.st_uid;
  };
  CHECK(owner(options.workspace) == 65534);
  CHECK(owner(options.workspace / "kernels") == 65534);
  CHECK(owner(options.workspace / "kernels" / "a.cu") == 65534);
  CHECK(owner(options.workspace / "link") == 65534);  // the link itself
  CHECK(owner(outside) == 0);                         // not what it points to, nor its hard link
  CHECK(owner(options.workspace / "model.py") == 0);  // protected paths stay the host's
  CHECK(ca::sandbox_identity(options) == ca::SandboxIdentity{65534, 65534});
}

TEST_CASE("a single path is given away as itself: a link planted in its place is not followed",
          "[sandbox][internals]") {
  // The compile driver and the verifier give single directories and FIFOs to the sandbox
  // user; a command that ran earlier may have replaced one with a link to a host file.
  if (!ca::testing::running_as_root()) CUDA_AGENT_SKIP("needs root: only root changes owners");
  ScratchDirectory scratch("give-path");
  const fs::path host_file = scratch.path() / "host.txt";
  ca::testing::write_file(host_file, "host file");
  const fs::path planted = scratch.path() / "obj";
  fs::create_symlink(host_file, planted);
  ca::detail::give_path_to(planted, ca::UserIdentity{65534, 65534});
  struct stat status {};
  REQUIRE(::lstat(planted.c_str(), &status) == 0);
  CHECK(status.st_uid == 65534);
  REQUIRE(::stat(host_file.c_str(), &status) == 0);
  CHECK(status.st_uid == 0);

  try {
    ca::detail::give_path_to(scratch.path() / "missing", ca::UserIdentity{65534, 65534});
    FAIL("giving a missing path away succeeded");
  } catch (const std::system_error& error) {
    CHECK(error.code() == std::errc::no_such_file_or_directory);
    CHECK_THAT(std::string(error.what()), Catch::Matchers::Contains("missing"));
  }
}
