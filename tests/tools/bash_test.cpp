// SPDX-License-Identifier: Apache-2.0
// The Bash tool: output, exit status, timeouts, truncation (also of gigabytes),
// the persistent working directory, the environment, and sandbox failures. The
// behaviour tests run through both real sandboxes: ProcessSandbox (always) and
// BubblewrapSandbox (skipped where bubblewrap cannot start).
#include "catch.hpp"

#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/tools/bash.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>

#include <sys/resource.h>

#include "tools/tool_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::call;
using Catch::Matchers::Contains;
using nlohmann::json;
// Short names: they become part of the test names.
using ProcessSandbox = ca::ProcessSandbox;
using BubblewrapSandbox = ca::BubblewrapSandbox;

namespace {

/// A workspace the sandbox user may write, a sandbox of kind S over it (when one can
/// start here) and a Bash tool running in it.
template <class S>
struct BashFixture {
  static constexpr bool confined = std::is_same_v<S, BubblewrapSandbox>;
  ca::testing::TempTree tree;
  ca::SandboxOptions options = ca::testing::sandbox_options_for(tree);
  ca::ToolContext context{tree.workspace()};
  std::optional<S> sandbox;
  std::optional<ca::BashTool<S>> bash;
  std::string unavailable;

  explicit BashFixture(ca::BashOptions bash_options = {}) {
    try {
      sandbox.emplace(options);
      if constexpr (confined) sandbox->check();
      bash.emplace(*sandbox, std::move(bash_options));
    } catch (const ca::SandboxError& error) {
      unavailable = error.what();
    }
  }
  [[nodiscard]] std::string sandbox_name() const { return confined ? "bubblewrap" : "process"; }
  ca::ToolResult shell(const std::string& command) { return call(*bash, context, json{{"command", command}}); }
  ca::ToolResult run(json arguments) { return call(*bash, context, arguments); }
};

}  // namespace

/// Leaves the test as skipped where bubblewrap cannot start; ProcessSandbox must always work.
#define REQUIRE_SANDBOX(f)                                                                \
  do {                                                                                    \
    if (!(f).bash) {                                                                      \
      if (!(f).confined) FAIL("ProcessSandbox could not be set up: " << (f).unavailable); \
      CUDA_AGENT_SKIP("bubblewrap cannot run here: " + (f).unavailable);                  \
    }                                                                                     \
  } while (false)

namespace {

long max_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

TEMPLATE_TEST_CASE("Bash returns the command's output and exit status", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const ca::ToolResult hello = f.shell("echo hello");
  CHECK_FALSE(hello.is_error);
  CHECK(hello.content == "hello");
  CHECK(hello.metadata["exit_code"] == 0);
  CHECK(hello.metadata["sandbox"] == f.sandbox_name());
  CHECK(hello.metadata["confined"] == f.confined);

  const ca::ToolResult failing = f.shell("echo partial; exit 3");
  CHECK(failing.is_error);
  CHECK(failing.content == "partial\n\nExit code 3");
  CHECK(failing.metadata["exit_code"] == 3);

  const ca::ToolResult interleaved = f.shell("echo out; echo err >&2; echo out2");
  CHECK(interleaved.content == "out\nerr\nout2");
}

TEMPLATE_TEST_CASE("Bash says so when a command prints nothing", "[tools][bash]", ProcessSandbox, BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const ca::ToolResult quiet = f.shell("true");
  CHECK_FALSE(quiet.is_error);
  CHECK(quiet.content == "(The command completed successfully and produced no output.)");
  const ca::ToolResult quiet_failure = f.shell("false");
  CHECK(quiet_failure.is_error);
  CHECK(quiet_failure.content == "(The command produced no output.)\n\nExit code 1");
}

TEMPLATE_TEST_CASE("Bash reports syntax errors as failures", "[tools][bash]", ProcessSandbox, BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const ca::ToolResult broken = f.shell("if then fi (");
  CHECK(broken.is_error);
  CHECK_THAT(broken.content, Contains("syntax error") && Contains("Exit code 2"));
}

TEMPLATE_TEST_CASE("Bash stops commands at their timeout and says so", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const auto started = std::chrono::steady_clock::now();
  const ca::ToolResult slow = f.run({{"command", "echo started; sleep 30"}, {"timeout", 500}});
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  CHECK(slow.is_error);
  CHECK(slow.metadata["timed_out"] == true);
  CHECK_THAT(slow.content, Contains("started") && Contains("Command timed out after 500 ms and was terminated.") &&
                               Contains("at most 600000 ms"));
}

TEST_CASE("Bash passes the default and the requested timeout to the sandbox", "[tools][bash]") {
  ca::testing::TempTree tree;
  ca::ToolContext context(tree.workspace());
  ca::testing::RecordingSandbox sandbox;
  sandbox.answer.exit_code = 0;
  ca::BashTool bash(sandbox);
  REQUIRE_FALSE(call(bash, context, R"({"command": "ls"})").is_error);
  REQUIRE_FALSE(call(bash, context, R"({"command": "ls", "timeout": 600000, "description": "List files"})").is_error);
  REQUIRE(sandbox.commands.size() == 2);
  CHECK(sandbox.commands[0].timeout == std::chrono::milliseconds(120'000));
  CHECK(sandbox.commands[1].timeout == std::chrono::milliseconds(600'000));
  const ca::Command& command = sandbox.commands[0];
  CHECK(command.merge_stderr);
  CHECK(command.working_directory == tree.workspace());
  CHECK(command.argv.front() == "/bin/bash");
  CHECK(command.environment.get("PAGER") == "cat");
  CHECK(command.environment.get("GIT_PAGER") == "cat");
  CHECK(command.environment.get("PIP_PROGRESS_BAR") == "off");
  CHECK(command.environment.get("TQDM_DISABLE") == "1");
  CHECK(command.environment.get("TERM") == "dumb");
  CHECK(command.output_limit >= 60'000);

  const ca::ToolResult too_long = call(bash, context, R"({"command": "ls", "timeout": 600001})");
  CHECK(too_long.is_error);
  CHECK_THAT(too_long.content, Contains("The parameter `timeout` must be at most 600000, but 600001 was provided."));
  CHECK_THAT(call(bash, context, R"({"command": "ls", "timeout": 0})").content,
             Contains("The parameter `timeout` must be at least 1"));
  CHECK(sandbox.commands.size() == 2);
}

TEMPLATE_TEST_CASE("Bash disables pagers and progress bars through the environment", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  CHECK(f.shell("echo $PAGER $GIT_PAGER $TQDM_DISABLE $PIP_PROGRESS_BAR").content == "cat cat 1 off");
}

TEMPLATE_TEST_CASE("Bash cuts long output in the middle and states how much", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const ca::ToolResult result = f.shell("seq 1 100000");
  CHECK_FALSE(result.is_error);
  CHECK(result.content.size() < 31'000);
  CHECK(result.content.starts_with("1\n2\n3\n"));
  CHECK(result.content.ends_with("99999\n100000"));
  CHECK_THAT(result.content,
             Contains("bytes omitted from the middle of 575.1 KB of output; redirect the output to a file "
                      "and inspect it with head, tail or grep"));
  CHECK(result.metadata["output_bytes"] == 588'895);
  CHECK(result.metadata["omitted_bytes"].get<std::uint64_t>() > 550'000);
}

TEMPLATE_TEST_CASE("Bash output stays capped for gigabytes of output, without growing memory", "[tools][bash][slow]",
                   ProcessSandbox, BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const long before = max_rss_kib();
  const auto started = std::chrono::steady_clock::now();
  const ca::ToolResult zeros = f.run({{"command", "head -c 3G /dev/zero"}, {"timeout", 300000}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const ca::ToolResult text = f.run({{"command", "yes 'a line of text' | head -c 512M"}, {"timeout", 300000}});
  const long grown_kib = max_rss_kib() - before;
  INFO("3 GiB took " << seconds << " s; peak RSS grew " << grown_kib << " KiB");
  CHECK_FALSE(zeros.is_error);
  CHECK(zeros.metadata["output_bytes"] == 3ull << 30);
  CHECK(zeros.content.size() < 31'000);
  CHECK_THAT(zeros.content, Contains("bytes omitted from the middle of 3.0 GB of output"));
  CHECK(text.metadata["output_bytes"] == 512ull << 20);
  CHECK(text.content.starts_with("a line of text\na line of text\n"));
  CHECK(text.content.size() < 31'000);
  CHECK(grown_kib < 64 * 1024);
}

TEMPLATE_TEST_CASE("Bash strips terminal control sequences and repairs invalid UTF-8", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  CHECK(f.shell("printf '\\033[31mred\\033[0m\\n'").content == "red");
  CHECK(f.shell("printf '10%%\\r100%%\\n'").content == "100%");
  CHECK(f.shell("printf 'bad \\377 byte'").content == "bad \xEF\xBF\xBD byte");
}

TEMPLATE_TEST_CASE("Bash keeps the working directory between calls", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  std::filesystem::create_directories(f.tree.workspace() / "kernels/sub");
  ca::hand_over_to_sandbox(f.tree.workspace(), f.options);
  CHECK(f.shell("pwd").content == f.tree.workspace().string());
  CHECK(f.shell("cd kernels").content == "(The command completed successfully and produced no output.)");
  CHECK(f.context.working_directory() == f.tree.workspace() / "kernels");
  CHECK(f.shell("pwd").content == f.tree.path("kernels"));
  // A command that exits (even with an error) still records where it ended.
  const ca::ToolResult exited = f.shell("cd sub && exit 4");
  CHECK(exited.is_error);
  CHECK(f.shell("pwd").content == f.tree.path("kernels/sub"));
  CHECK(f.shell("pwd").metadata["working_directory"] == f.tree.path("kernels/sub"));
  // A directory whose name is not UTF-8 is kept, and reported in valid UTF-8.
  REQUIRE_FALSE(f.shell("mkdir -p $'bad\\xff' && cd $'bad\\xff'").is_error);
  const ca::ToolResult odd = f.shell("pwd");
  CHECK(odd.metadata["working_directory"].get<std::string>().ends_with("bad\xEF\xBF\xBD"));
  CHECK_NOTHROW(odd.metadata.dump());
  REQUIRE_FALSE(f.shell("cd ..").is_error);
  // The marker that carries the directory never shows.
  CHECK_THAT(f.shell("echo x").content, !Contains("__cuda_agent"));
}

TEST_CASE("Bash accepts a workspace given as a relative path", "[tools][bash]") {
  ca::testing::TempTree tree;
  ca::ProcessSandbox sandbox(ca::testing::sandbox_options_for(tree));
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(tree.base());
  ca::ToolContext context("ws");
  ca::BashTool bash(sandbox);
  const ca::ToolResult result = call(bash, context, R"({"command": "pwd"})");
  std::filesystem::current_path(previous);
  CHECK(result.content == tree.workspace().string());
}

TEMPLATE_TEST_CASE("Bash resets a working directory outside the workspace, or one that vanished", "[tools][bash]",
                   ProcessSandbox, BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const ca::ToolResult outside = f.shell("cd / && echo moved");
  CHECK_FALSE(outside.is_error);
  CHECK(outside.content == "moved\n\nShell cwd was reset to " + f.tree.workspace().string() +
                               " (commands may leave the working directory only within the workspace).");
  CHECK(f.context.working_directory() == f.tree.workspace());

  std::filesystem::create_directories(f.tree.workspace() / "tmp");
  REQUIRE_FALSE(f.shell("cd tmp").is_error);
  std::filesystem::remove_all(f.tree.workspace() / "tmp");
  const ca::ToolResult vanished = f.shell("pwd");
  CHECK_THAT(vanished.content, Contains("Note: the working directory " + f.tree.path("tmp") +
                                        " no longer exists; "
                                        "running in " +
                                        f.tree.workspace().string()));
  CHECK(f.context.working_directory() == f.tree.workspace());
}

TEMPLATE_TEST_CASE("Bash stops a command when the episode is cancelled", "[tools][bash]", ProcessSandbox,
                   BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  std::stop_source stop;
  f.context.set_cancellation(stop.get_token());
  std::jthread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.request_stop();
  });
  const auto started = std::chrono::steady_clock::now();
  const ca::ToolResult result = f.shell("sleep 30");
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  CHECK(result.is_error);
  CHECK_THAT(result.content, Contains("Command was cancelled."));
}

TEMPLATE_TEST_CASE("Bash reports a command killed by a signal", "[tools][bash]", ProcessSandbox, BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  const ca::ToolResult killed = f.shell("kill -KILL $$");
  CHECK(killed.is_error);
  if (f.confined)  // bubblewrap reports its shell's death as exit status 128 + 9
    CHECK_THAT(killed.content, Contains("Exit code 137 (128 + SIGKILL: the command, or the last one it ran, was "
                                        "killed by that signal)"));
  else
    CHECK_THAT(killed.content, Contains("Command was killed by SIGKILL."));
  // A program the shell ran that crashed: the shell's own report, and the signal named.
  const ca::ToolResult crashed = f.shell("bash -c 'kill -TERM $$'");
  CHECK(crashed.is_error);
  CHECK_THAT(crashed.content, Contains("Exit code 143 (128 + SIGTERM"));
}

TEST_CASE("Bash turns sandbox failures into error results", "[tools][bash]") {
  ca::testing::TempTree tree;
  ca::ToolContext context(tree.workspace());
  ca::testing::RecordingSandbox sandbox;
  sandbox.fail_with = "bubblewrap is not installed";
  ca::BashTool bash(sandbox);
  const ca::ToolResult result = call(bash, context, R"({"command": "ls"})");
  CHECK(result.is_error);
  CHECK(result.content == "Error: The sandbox could not run the command: bubblewrap is not installed");

  sandbox.fail_as_process = true;
  sandbox.fail_with = "cannot execute '/bin/bash'";  // ProcessError adds the reason
  CHECK(call(bash, context, R"({"command": "ls"})").content ==
        "Error: The command could not be started: cannot execute '/bin/bash': No such file or directory");

  sandbox.fail_with.reset();
  sandbox.answer.exit_code = 1;
  sandbox.answer.limits_hit = {ca::LimitKind::memory};
  CHECK_THAT(call(bash, context, R"({"command": "ls"})").content,
             Contains("Exit code 1 (it exceeded the memory limit)"));
  sandbox.answer.limits_hit = {ca::LimitKind::wall_time, ca::LimitKind::cpu_time, ca::LimitKind::file_size,
                               ca::LimitKind::open_files, ca::LimitKind::processes};
  CHECK_THAT(call(bash, context, R"({"command": "ls"})").content,
             Contains("Exit code 1 (it exceeded the CPU time limit, it exceeded the file size limit, it exceeded the "
                      "open files limit, it exceeded the process limit)"));
  sandbox.answer.exit_code = 137;
  sandbox.answer.limits_hit = {ca::LimitKind::memory};
  CHECK_THAT(call(bash, context, R"({"command": "ls"})").content,
             Contains("Exit code 137 (128 + SIGKILL: the command, or the last one it ran, was killed by that signal; "
                      "it exceeded the memory limit)"));
  sandbox.answer.exit_code.reset();
  sandbox.answer.signal = SIGXCPU;
  sandbox.answer.limits_hit = {ca::LimitKind::cpu_time};
  CHECK_THAT(call(bash, context, R"({"command": "ls"})").content,
             Contains("Command was killed by SIGXCPU (it exceeded the CPU time limit)."));
}

TEMPLATE_TEST_CASE("Bash validates its arguments", "[tools][bash]", ProcessSandbox, BubblewrapSandbox) {
  BashFixture<TestType> f;
  REQUIRE_SANDBOX(f);
  CHECK_THAT(f.run(json::object()).content, Contains("The required parameter `command` is missing."));
  CHECK_THAT(f.run(json{{"command", "ls"}, {"timeout", "100"}}).content,
             Contains("The parameter `timeout` must be an integer, but a string was provided (\"100\")"));
  CHECK_THAT(f.run(json{{"command", "ls"}, {"run_in_background", true}}).content,
             Contains("An unexpected parameter `run_in_background` was provided. Valid parameters: command, "
                      "description, timeout."));
  CHECK_THAT(f.shell("   ").content, Contains("Error: The command is empty."));
  CHECK(f.run(json{{"command", "echo x"}, {"description", "Print x"}}).metadata["description"] == "Print x");
}
