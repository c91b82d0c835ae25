// SPDX-License-Identifier: Apache-2.0
// SlurmJobLauncher against stand-ins for sbatch, squeue and scancel on a PATH of their own
// (shell scripts that record their arguments, standard input and environment, and answer
// what the test wrote for them): the batch script and options of one job and of a job
// array, the worker's token passed by name only, Slurm's states read as launch states, a
// job Slurm no longer knows read as ended, each failure told with Slurm's words, and worker
// arguments given as shell words arriving whole when the batch script runs. The real
// cluster is in tests/server/slurm_workers_process_test.py.
#include "catch.hpp"

#include <cuda_agent/detail/shell_command.hpp>
#include <cuda_agent/process.hpp>
#include <cuda_agent/service/slurm_job_launcher.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

/// A directory with fake sbatch/squeue/scancel. Each records "$@" one argument per line in
/// <name>.args, its standard input in <name>.stdin and its environment in <name>.env, then
/// prints <name>.out, writes <name>.err to stderr and exits with <name>.rc (0 by default).
struct FakeSlurm {
  fs::path directory;

  FakeSlurm() {
    directory = fs::temp_directory_path() / ("cuda-agent-fake-slurm-" + std::to_string(::getpid()));
    fs::remove_all(directory);
    fs::create_directories(directory / "bin");
    for (const char* name : {"sbatch", "squeue", "scancel"}) {
      const fs::path script = directory / "bin" / name;
      const std::string base = (directory / name).string();
      write(script, "#!/bin/sh\n: > '" + base + ".args'\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '" + base +
                        ".args'; done\ncat > '" + base + ".stdin'\nenv > '" + base + ".env'\n[ -f '" + base +
                        ".out' ] && cat '" + base + ".out'\n[ -f '" + base + ".err' ] && cat '" + base +
                        ".err' >&2\nexit $(cat '" + base + ".rc' 2>/dev/null || echo 0)\n");
      fs::permissions(script, fs::perms::owner_all);
    }
  }
  ~FakeSlurm() { fs::remove_all(directory); }
  FakeSlurm(const FakeSlurm&) = delete;
  FakeSlurm& operator=(const FakeSlurm&) = delete;

  void answer(const std::string& command, const std::string& out, int rc = 0, const std::string& err = "") const {
    write(directory / (command + ".out"), out);
    write(directory / (command + ".rc"), std::to_string(rc));
    write(directory / (command + ".err"), err);
  }
  [[nodiscard]] std::vector<std::string> arguments(const std::string& command) const {
    std::vector<std::string> lines;
    std::istringstream text(read(directory / (command + ".args")));
    for (std::string line; std::getline(text, line);) lines.push_back(line);
    return lines;
  }
  [[nodiscard]] std::string input(const std::string& command) const { return read(directory / (command + ".stdin")); }
  [[nodiscard]] std::string environment(const std::string& command) const {
    return read(directory / (command + ".env"));
  }

  [[nodiscard]] ca::SlurmJobLauncher launcher(ca::SlurmJobLauncherOptions options = {}) const {
    ca::Environment tools;
    tools.set("PATH", (directory / "bin").string() + ":/usr/bin:/bin").set("HOME", "/root").set("SECRET_OF_HOST", "x");
    return ca::SlurmJobLauncher(std::move(options), std::move(tools));
  }
};

bool contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

ca::WorkerLaunch worker(const std::string& name) {
  ca::WorkerLaunch launch;
  launch.name = name;
  launch.command = {"/opt/cuda agent/bin/cuda-agent", "worker", "--name", name, "--note", "it's"};
  launch.environment = {{"CUDA_AGENT_WORKER_TOKEN", "token-abc"}};
  launch.gpus = 1;
  launch.cpus = 2;
  return launch;
}

}  // namespace

TEST_CASE("slurm: one job runs its command exactly, with its token passed by name only") {
  const FakeSlurm slurm;
  slurm.answer("sbatch", "4242\n");
  ca::SlurmJobLauncherOptions options;
  options.partition = "gpu";
  options.log_directory = "/var/log/workers";
  options.sbatch_arguments = {"--time=01:00:00"};
  ca::SlurmJobLauncher launcher = slurm.launcher(options);

  CHECK(launcher.submit(worker("w-0-0")) == "4242");
  const std::vector<std::string> arguments = slurm.arguments("sbatch");
  CHECK(contains(arguments, "--parsable"));
  CHECK(contains(arguments, "--job-name=w-0-0"));
  CHECK(contains(arguments, "--partition=gpu"));
  CHECK(contains(arguments, "--gres=gpu:1"));
  CHECK(contains(arguments, "--cpus-per-task=2"));
  CHECK(contains(arguments, "--time=01:00:00"));
  CHECK(contains(arguments, "--output=/var/log/workers/w-0-0-%j.log"));
  // The host's own variables that are passed on, and the launch's, by name; nothing else.
  CHECK(contains(arguments, "--export=PATH,HOME,CUDA_AGENT_WORKER_TOKEN"));
  for (const std::string& argument : arguments) CHECK(argument.find("token-abc") == std::string::npos);
  CHECK(slurm.environment("sbatch").find("CUDA_AGENT_WORKER_TOKEN=token-abc") != std::string::npos);
  // The command quoted for the shell, word by word, and exec'd (scancel's SIGTERM reaches it).
  CHECK(slurm.input("sbatch") ==
        "#!/bin/sh\nexec '/opt/cuda agent/bin/cuda-agent' worker --name w-0-0 --note 'it'\\''s'\n");
}

TEST_CASE("slurm: worker arguments given as shell words reach the worker whole through the batch script") {
  // What `cuda-agent serve --worker-arguments` takes: words as a shell splits them.
  CHECK(ca::detail::shell_words(" \t").empty());
  CHECK(ca::detail::shell_words("$HOME *") == std::vector<std::string>{"$HOME", "*"});  // nothing expanded
  CHECK_THROWS_AS(ca::detail::shell_words("--cache-dir '/scratch"), std::invalid_argument);
  CHECK_THROWS_AS(ca::detail::shell_words("--note \"open"), std::invalid_argument);
  CHECK_THROWS_AS(ca::detail::shell_words("--note end\\"), std::invalid_argument);

  const FakeSlurm slurm;
  slurm.answer("sbatch", "4243\n");
  // A stand-in worker that writes its arguments, one a line, beside itself.
  const fs::path program = slurm.directory / "bin" / "cuda agent";
  write(program, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$0.args\"\n");
  fs::permissions(program, fs::perms::owner_all);
  ca::WorkerLaunch launch = worker("w-0-0");
  launch.command = {program.string(), "worker"};
  for (const std::string& word : ca::detail::shell_words(
           R"(--slots-per-device 2 --cache-dir '/scratch/cuda agent' --note "it's \"here\" \\o/" a\ b '')"))
    launch.command.push_back(word);
  ca::SlurmJobLauncher launcher = slurm.launcher();
  CHECK(launcher.submit(launch) == "4243");

  // The batch script, run as a node runs it.
  write(slurm.directory / "job.sh", slurm.input("sbatch"));
  ca::ProcessSpec job;
  job.argv = {"/bin/sh", (slurm.directory / "job.sh").string()};
  REQUIRE(ca::run_process(job).succeeded());
  std::vector<std::string> received;
  std::istringstream lines(read(program.string() + ".args"));
  for (std::string line; std::getline(lines, line);) received.push_back(line);
  CHECK(received == std::vector<std::string>{"worker", "--slots-per-device", "2", "--cache-dir", "/scratch/cuda agent",
                                             "--note", "it's \"here\" \\o/", "a b", ""});
}

TEST_CASE("slurm: workers started together are one job array, one task each") {
  const FakeSlurm slurm;
  slurm.answer("sbatch", "77;cluster\n");
  ca::SlurmJobLauncher launcher = slurm.launcher();
  const std::vector<ca::WorkerLaunch> launches = {worker("w-0-0"), worker("w-1-0"), worker("w-2-0")};

  CHECK(launcher.submit_all(launches) == std::vector<std::string>{"77_0", "77_1", "77_2"});
  const std::vector<std::string> arguments = slurm.arguments("sbatch");
  CHECK(contains(arguments, "--array=0-2"));
  const std::string script = slurm.input("sbatch");
  CHECK(script.find("case \"$SLURM_ARRAY_TASK_ID\" in") != std::string::npos);
  CHECK(script.find("  1) exec '/opt/cuda agent/bin/cuda-agent' worker --name w-1-0") != std::string::npos);
  CHECK(script.find("token-abc") == std::string::npos);

  SECTION("launches that differ in more than their command are jobs of their own") {
    std::vector<ca::WorkerLaunch> mixed = launches;
    mixed[1].gpus = 2;
    slurm.answer("sbatch", "90\n");
    CHECK(launcher.submit_all(mixed) == std::vector<std::string>{"90", "90", "90"});
    CHECK_FALSE(contains(slurm.arguments("sbatch"), "--array=0-2"));
  }
}

TEST_CASE("slurm: squeue's states are launch states, and a job it no longer knows has ended") {
  const FakeSlurm slurm;
  ca::SlurmJobLauncher launcher = slurm.launcher();

  slurm.answer("squeue", "PENDING|Resources\n");
  ca::LaunchStatus status = launcher.status("5_1");
  CHECK(status.state == ca::LaunchState::pending);
  CHECK(status.message == "PENDING (Resources)");
  CHECK(contains(slurm.arguments("squeue"), "--jobs=5_1"));
  CHECK(contains(slurm.arguments("squeue"), "--states=all"));

  slurm.answer("squeue", "RUNNING|None\n");
  CHECK(launcher.status("5_1").state == ca::LaunchState::running);
  slurm.answer("squeue", "FAILED|NonZeroExitCode\n");
  status = launcher.status("5_1");
  CHECK(status.state == ca::LaunchState::ended);
  CHECK(status.message == "FAILED (NonZeroExitCode)");
  slurm.answer("squeue", "CANCELLED|None\n");
  CHECK(launcher.status("5_1").state == ca::LaunchState::ended);
  slurm.answer("squeue", "");
  CHECK(launcher.status("5_1").state == ca::LaunchState::ended);
  slurm.answer("squeue", "", 1, "slurm_load_jobs error: Invalid job id specified\n");
  status = launcher.status("5_1");
  CHECK(status.state == ca::LaunchState::ended);
  CHECK(status.message == "no longer known to Slurm");
}

TEST_CASE("slurm: every failure is told with Slurm's words") {
  const FakeSlurm slurm;
  ca::SlurmJobLauncher launcher = slurm.launcher();

  slurm.answer("sbatch", "", 1, "sbatch: error: invalid partition specified: gpu\n");
  CHECK_THROWS_WITH(launcher.submit(worker("w")), Catch::Contains("invalid partition specified: gpu"));
  slurm.answer("sbatch", "Submitted batch job\n");
  CHECK_THROWS_WITH(launcher.submit(worker("w")), Catch::Contains("no job id"));

  slurm.answer("squeue", "", 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n");
  CHECK_THROWS_WITH(launcher.status("5"), Catch::Contains("Unable to contact slurm controller"));

  slurm.answer("scancel", "", 1, "scancel: error: Kill job error on job id 5: Access/permission denied\n");
  CHECK_THROWS_WITH(launcher.stop("5"), Catch::Contains("Access/permission denied"));
  slurm.answer("scancel", "", 1, "scancel: error: Kill job error on job id 5: Invalid job id specified\n");
  CHECK_NOTHROW(launcher.stop("5"));
  CHECK(slurm.arguments("scancel") == std::vector<std::string>{"5"});

  ca::Environment nowhere;
  nowhere.set("PATH", (slurm.directory / "empty").string());
  ca::SlurmJobLauncher lost({}, nowhere);
  CHECK_THROWS_WITH(lost.submit(worker("w")), Catch::Contains("sbatch is not on the PATH"));
  CHECK_THROWS_AS(launcher.submit(ca::WorkerLaunch{}), std::invalid_argument);
}
