// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/process.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stop_token>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace ca = cuda_agent;
using namespace std::chrono_literals;

namespace {

ca::ProcessSpec shell(std::string script) {
  ca::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", std::move(script)};
  spec.environment = ca::Environment::from_current({"PATH"});
  return spec;
}

std::filesystem::path scratch_directory() {
  auto path = std::filesystem::temp_directory_path() /
              ("cuda-agent-process-test-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(path);
  return path;
}

bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno != ESRCH;
  // A zombie waiting for init to reap it no longer runs.
  std::ifstream status("/proc/" + std::to_string(pid) + "/stat");
  std::string skip, state;
  status >> skip >> skip >> state;
  return state != "Z" && !state.empty();
}

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

}  // namespace

TEST_CASE("exit codes and signals are reported separately", "[process]") {
  const auto exited = ca::run_process(shell("exit 3"));
  CHECK(exited.exit_code == 3);
  CHECK_FALSE(exited.signal);
  CHECK_FALSE(exited.timed_out);
  CHECK_FALSE(exited.succeeded());
  CHECK(ca::describe_exit(exited) == "exit code 3");

  const auto killed = ca::run_process(shell("kill -SEGV $$"));
  CHECK_FALSE(killed.exit_code);
  CHECK(killed.signal == SIGSEGV);
  CHECK(ca::describe_exit(killed) == "killed by SIGSEGV");

  // A shell reporting 137 is an exit code, not a signal.
  const auto fake = ca::run_process(shell("exit 137"));
  CHECK(fake.exit_code == 137);
  CHECK_FALSE(fake.signal);

  const auto ok = ca::run_process(shell("true"));
  CHECK(ok.succeeded());
}

TEST_CASE("stdout and stderr are captured separately or merged", "[process]") {
  auto spec = shell("echo out; echo err >&2");
  const auto separate = ca::run_process(spec);
  CHECK(separate.standard_output.text == "out\n");
  CHECK(separate.standard_error.text == "err\n");

  spec.merge_stderr = true;
  const auto merged = ca::run_process(spec);
  CHECK(merged.standard_output.text == "out\nerr\n");
  CHECK(merged.standard_error.text.empty());
}

TEST_CASE("large output on both streams does not deadlock", "[process]") {
  auto spec = shell("head -c 5000000 /dev/zero >&2; head -c 5000000 /dev/zero; echo done >&2");
  spec.timeout = 30s;
  const auto result = ca::run_process(spec);
  CHECK(result.succeeded());
  CHECK(result.standard_output.total_bytes == 5'000'000);
  CHECK(result.standard_error.total_bytes == 5'000'005);
}

TEST_CASE("100 MB of output is captured capped, head and tail kept, without memory growth", "[process]") {
  auto spec = shell("printf 'FIRST-LINE\\n'; head -c 100000000 /dev/zero | tr '\\0' 'x'; printf '\\nLAST-LINE\\n'");
  spec.output_limit = 64 * 1024;
  spec.timeout = 60s;
  const long before = resident_kib();
  const auto result = ca::run_process(spec);
  const long after = resident_kib();

  REQUIRE(result.succeeded());
  const auto& out = result.standard_output;
  CHECK(out.total_bytes == 100'000'000 + 11 + 11);
  CHECK(out.truncated());
  CHECK(out.elided_bytes == out.total_bytes - 64 * 1024);
  CHECK(out.text.rfind("FIRST-LINE\n", 0) == 0);
  CHECK((out.text.size() >= 10 && out.text.substr(out.text.size() - 10) == "LAST-LINE\n"));
  CHECK(out.text.find("bytes elided ...]") != std::string::npos);
  CHECK(out.text.size() < 64 * 1024 + 100);
  // Capture keeps at most about twice the limit; anything near 100 MB would show here.
  CHECK(after - before < 16 * 1024);
}

TEST_CASE("a deadline kills the whole group, including a grandchild that ignores SIGTERM", "[process]") {
  const auto directory = scratch_directory();
  const auto pid_file = directory / "grandchild.pid";
  auto spec = shell("sh -c 'trap \"\" TERM; echo $$ > " + pid_file.string() + "; exec sleep 300' & wait");
  spec.timeout = 500ms;
  spec.kill_grace = 200ms;

  const auto started = std::chrono::steady_clock::now();
  const auto result = ca::run_process(spec);
  const auto elapsed = std::chrono::steady_clock::now() - started;

  CHECK(result.timed_out);
  CHECK(elapsed < 5s);
  pid_t grandchild = 0;
  std::ifstream(pid_file) >> grandchild;
  REQUIRE(grandchild > 0);
  for (int i = 0; i < 100 && process_alive(grandchild); ++i) std::this_thread::sleep_for(10ms);
  CHECK_FALSE(process_alive(grandchild));
  std::filesystem::remove_all(directory);
}

TEST_CASE("a child that closes its output but keeps running still times out", "[process]") {
  auto spec = shell("exec >&- 2>&-; sleep 300");
  spec.timeout = 300ms;
  spec.kill_grace = 100ms;
  const auto started = std::chrono::steady_clock::now();
  const auto result = ca::run_process(spec);
  CHECK(result.timed_out);
  CHECK(result.signal == SIGTERM);
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  CHECK(ca::describe_exit(result) == "killed by SIGTERM after its deadline");
}

TEST_CASE("a child ignoring SIGTERM is killed after the grace period", "[process]") {
  auto spec = shell("trap '' TERM; while :; do sleep 0.05; done");
  spec.timeout = 200ms;
  spec.kill_grace = 200ms;
  const auto result = ca::run_process(spec);
  CHECK(result.timed_out);
  CHECK(result.signal == SIGKILL);
}

TEST_CASE("processes left in the group are killed when the child exits", "[process]") {
  const auto directory = scratch_directory();
  const auto pid_file = directory / "background.pid";
  const auto result = ca::run_process(shell("sleep 300 & echo $! > " + pid_file.string()));
  CHECK(result.succeeded());
  pid_t background = 0;
  std::ifstream(pid_file) >> background;
  REQUIRE(background > 0);
  for (int i = 0; i < 100 && process_alive(background); ++i) std::this_thread::sleep_for(10ms);
  CHECK_FALSE(process_alive(background));
  std::filesystem::remove_all(directory);
}

TEST_CASE("the environment is exactly what the caller passes", "[process]") {
  ::setenv("CUDA_AGENT_TEST_SECRET", "hunter2", 1);

  ca::ProcessSpec spec;
  spec.argv = {"/usr/bin/env"};
  const auto empty = ca::run_process(spec);
  CHECK(empty.succeeded());
  CHECK(empty.standard_output.text.empty());

  spec.environment = ca::Environment::from_current({"PATH", "CUDA_AGENT_TEST_UNSET_VARIABLE"});
  spec.environment.set("VISIBLE", "yes");
  const auto allowed = ca::run_process(spec);
  CHECK(allowed.standard_output.text.find("PATH=") != std::string::npos);
  CHECK(allowed.standard_output.text.find("VISIBLE=yes") != std::string::npos);
  CHECK(allowed.standard_output.text.find("hunter2") == std::string::npos);
  CHECK(allowed.standard_output.text.find("CUDA_AGENT_TEST_UNSET_VARIABLE") == std::string::npos);

  spec.environment = ca::Environment::inherit_all();
  CHECK(ca::run_process(spec).standard_output.text.find("CUDA_AGENT_TEST_SECRET=hunter2") != std::string::npos);
  ::unsetenv("CUDA_AGENT_TEST_SECRET");
}

TEST_CASE("working directory and stdin data reach the child", "[process]") {
  const auto directory = scratch_directory();
  auto spec = shell("pwd; cat");
  spec.working_directory = directory;
  spec.stdin_data = "hello from stdin\n";
  const auto result = ca::run_process(spec);
  CHECK(result.standard_output.text == std::filesystem::canonical(directory).string() + "\nhello from stdin\n");

  // Megabytes of input while the child also writes: no deadlock either way.
  auto echo = shell("cat");
  echo.stdin_data = std::string(3'000'000, 'z');
  echo.output_limit = 16;
  const auto echoed = ca::run_process(echo);
  CHECK(echoed.succeeded());
  CHECK(echoed.standard_output.total_bytes == 3'000'000);

  // A child that never reads its input does not block the runner.
  auto ignore = shell("exit 0");
  ignore.stdin_data = std::string(10'000'000, 'q');
  CHECK(ca::run_process(ignore).succeeded());

  // Without stdin data the child reads end of file at once.
  CHECK(ca::run_process(shell("cat")).succeeded());
  std::filesystem::remove_all(directory);
}

TEST_CASE("failures to start are exceptions naming the cause", "[process]") {
  ca::ProcessSpec missing;
  missing.argv = {"cuda-agent-no-such-program"};
  CHECK_THROWS_AS(ca::run_process(missing), ca::ProcessError);

  const auto directory = scratch_directory();
  const auto data_file = directory / "data.txt";
  std::ofstream(data_file) << "not a program";
  std::filesystem::permissions(data_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ca::ProcessSpec not_executable;
  not_executable.argv = {data_file.string()};
  try {
    (void)ca::run_process(not_executable);
    FAIL("expected ProcessError");
  } catch (const ca::ProcessError& error) {
    CHECK(std::string(error.what()) == "cannot execute '" + data_file.string() + "': Permission denied");
    CHECK(error.code() == std::errc::permission_denied);
  }
  std::filesystem::remove_all(directory);

  auto bad_directory = shell("true");
  bad_directory.working_directory = "/nonexistent/cuda-agent";
  try {
    (void)ca::run_process(bad_directory);
    FAIL("expected ProcessError");
  } catch (const ca::ProcessError& error) {
    CHECK(std::string(error.what()).find("enter its working directory") != std::string::npos);
  }

  CHECK_THROWS_AS(ca::run_process(ca::ProcessSpec{}), ca::ProcessError);
}

TEST_CASE("cancellation from another thread stops the child", "[process]") {
  std::stop_source stop;
  auto spec = shell("sleep 300");
  spec.cancellation = stop.get_token();
  spec.kill_grace = 100ms;
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    stop.request_stop();
  });
  const auto started = std::chrono::steady_clock::now();
  const auto result = ca::run_process(spec);
  canceller.join();
  CHECK(result.cancelled);
  CHECK_FALSE(result.timed_out);
  CHECK(std::chrono::steady_clock::now() - started < 5s);
}

TEST_CASE("descriptors do not leak into the child unless asked for", "[process]") {
  const auto directory = scratch_directory();
  const auto file = directory / "open-file";
  std::ofstream(file) << "x";
  const int kept = ::open(file.c_str(), O_RDONLY);  // deliberately without O_CLOEXEC
  const int leaked = ::open(file.c_str(), O_RDONLY);
  REQUIRE(kept >= 0);
  REQUIRE(leaked >= 0);

  // `[` is a shell builtin: unlike `ls /proc/self/fd`, it opens no descriptor of its own
  // that could take the number under test.
  auto spec = shell("for fd in " + std::to_string(kept) + " " + std::to_string(leaked) +
                    "; do if [ -e /proc/self/fd/$fd ]; then echo open $fd; else echo closed $fd; fi; done");
  spec.child.inherited_fds = {kept};
  const auto result = ca::run_process(spec);
  CHECK(result.standard_output.text == "open " + std::to_string(kept) + "\nclosed " + std::to_string(leaked) + "\n");
  ::close(kept);
  ::close(leaked);
  std::filesystem::remove_all(directory);
}

TEST_CASE("resource limits apply in the child only", "[process]") {
  auto spec = shell("ulimit -n; exec head -c 2000000 /dev/zero > big");
  const auto directory = scratch_directory();
  spec.working_directory = directory;
  spec.child.rlimits = {{RLIMIT_NOFILE, 64, 64}, {RLIMIT_FSIZE, 1 << 20, 1 << 20}};
  const auto result = ca::run_process(spec);
  CHECK(result.standard_output.text.rfind("64\n", 0) == 0);
  CHECK(result.signal == SIGXFSZ);
  CHECK(std::filesystem::file_size(directory / "big") == (1u << 20));
  std::filesystem::remove_all(directory);
}

TEST_CASE("wall time, CPU time and memory are measured", "[process]") {
  const auto result = ca::run_process(shell("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"));
  CHECK(result.succeeded());
  CHECK(result.wall_time > 0ns);
  CHECK(result.user_cpu_time + result.system_cpu_time > 0us);
  CHECK(result.max_resident_kib > 0);
}

TEST_CASE("find_program searches the given PATH", "[process]") {
  ca::Environment environment;
  environment.set("PATH", "/nonexistent:/bin");
  CHECK(ca::find_program("sh", environment) == std::filesystem::path("/bin/sh"));
  CHECK_FALSE(ca::find_program("cuda-agent-no-such-program", environment));
  CHECK(ca::find_program("./relative", environment) == std::filesystem::path("./relative"));
  CHECK_FALSE(ca::find_program("", environment));
}
