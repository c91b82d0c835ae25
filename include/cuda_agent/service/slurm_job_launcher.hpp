// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `SlurmJobLauncher`: a `WorkerLauncher` that runs worker processes as Slurm batch jobs
/// through Slurm's own commands (`sbatch`, `squeue`, `scancel`), so that it needs nothing
/// of Slurm's at build time and works from any submit host. The workers a fleet starts
/// together go in one job array, one task per worker; a replacement is a job of its own.

#include <algorithm>    // all_of
#include <chrono>       // milliseconds
#include <cmath>        // ceil
#include <cstddef>      // size_t
#include <filesystem>   // path
#include <map>          // map
#include <optional>     // optional
#include <span>         // span
#include <stdexcept>    // runtime_error, invalid_argument
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include "cuda_agent/detail/shell_command.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/service/worker_launcher.hpp"

namespace cuda_agent {

struct SlurmJobLauncherOptions {
  /// Empty: the cluster's default partition.
  std::string partition;
  /// The generic resource a worker's GPUs are asked for as (`--gres=gpu:N`).
  std::string gpu_resource = "gpu";
  /// Further `sbatch` options, as given (`--account=...`, `--qos=...`, `--time=...`).
  std::vector<std::string> sbatch_arguments;
  /// Where each job writes its output, `<name>-<job id>.log` (a path on the node that runs
  /// it). Empty: nowhere.
  std::filesystem::path log_directory;
  /// Variables of this process that a job gets besides its launch's own (SLURM_* always).
  /// Nothing else is passed on: a secret in the coordinator's environment stays there.
  std::vector<std::string> passed_variables = {"PATH", "LD_LIBRARY_PATH", "HOME", "LANG", "TMPDIR"};
  /// How long one `sbatch`, `squeue` or `scancel` may take.
  std::chrono::milliseconds command_timeout{30'000};
};

/// Runs worker processes as Slurm batch jobs. `sbatch` reads the batch script from its
/// standard input and the launch's variables from its own environment (`--export` names
/// them, so no value is on a command line). Conforms to `WorkerLauncher` and
/// `BatchWorkerLauncher`.
class SlurmJobLauncher {
 public:
  explicit SlurmJobLauncher(SlurmJobLauncherOptions options = {},
                            Environment tools_environment = Environment::inherit_all())
      : options_(std::move(options)), tools_(std::move(tools_environment)) {}

  /// One batch job running `launch.command`; returns its job id. Throws std::runtime_error
  /// with sbatch's reason where it refuses the job or cannot be run.
  std::string submit(const WorkerLaunch& launch) {
    if (launch.command.empty()) throw std::invalid_argument("a worker launch needs a command");
    std::vector<std::string> arguments = sbatch_arguments(launch, launch.name, "%j");
    return submitted_id(run("sbatch", std::move(arguments), batch_script({&launch, 1}), launch.environment));
  }

  /// One job array for launches that differ only in their command and name (task i runs
  /// `launches[i]`), with a job id per task ("<array id>_<i>"); otherwise one job each.
  std::vector<std::string> submit_all(std::span<const WorkerLaunch> launches) {
    std::vector<std::string> jobs;
    if (launches.empty()) return jobs;
    const WorkerLaunch& first = launches.front();
    const bool one_array = std::all_of(launches.begin(), launches.end(), [&](const WorkerLaunch& launch) {
      return !launch.command.empty() && launch.environment == first.environment && launch.gpus == first.gpus &&
             launch.cpus == first.cpus;
    });
    if (!one_array || launches.size() == 1) {
      for (const WorkerLaunch& launch : launches) jobs.push_back(submit(launch));
      return jobs;
    }
    std::vector<std::string> arguments = sbatch_arguments(first, first.name, "%A_%a");
    arguments.push_back("--array=0-" + std::to_string(launches.size() - 1));
    const std::string array =
        submitted_id(run("sbatch", std::move(arguments), batch_script(launches), first.environment));
    for (std::size_t task = 0; task < launches.size(); ++task) jobs.push_back(array + "_" + std::to_string(task));
    return jobs;
  }

  /// How the job stands, from `squeue` (which lists ended jobs for a few minutes after; a
  /// job it no longer knows has ended). Throws where Slurm cannot be asked.
  LaunchStatus status(const std::string& job) {
    const ProcessResult result =
        run_unchecked("squeue", {"--noheader", "--states=all", "--jobs=" + job, "--format=%T|%r"});
    const std::string output = trimmed(result.standard_output.text);
    if (!result.succeeded()) {
      if (mentions_unknown_job(result)) return {LaunchState::ended, "no longer known to Slurm"};
      throw std::runtime_error("squeue: " + reason(result));
    }
    if (output.empty()) return {LaunchState::ended, "no longer known to Slurm"};
    const std::string line = output.substr(0, output.find('\n'));
    const std::size_t bar = line.find('|');
    const std::string state = line.substr(0, bar);
    const std::string why = bar == std::string::npos ? std::string() : line.substr(bar + 1);
    const std::string message = why.empty() || why == "None" ? state : state + " (" + why + ")";
    if (state == "PENDING" || state == "CONFIGURING" || state == "REQUEUED" || state == "REQUEUE_HOLD" ||
        state == "REQUEUE_FED" || state == "RESIZING" || state == "SUSPENDED" || state == "STOPPED") {
      return {LaunchState::pending, message};
    }
    if (state == "RUNNING" || state == "COMPLETING" || state == "SIGNALING" || state == "STAGE_OUT") {
      return {LaunchState::running, message};
    }
    return {LaunchState::ended, message};  // COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, ...
  }

  /// `scancel`: the job's processes get SIGTERM, then SIGKILL after the cluster's KillWait.
  /// Nothing for a job that has ended.
  void stop(const std::string& job) {
    const ProcessResult result = run_unchecked("scancel", {job});
    if (!result.succeeded() && !mentions_unknown_job(result))
      throw std::runtime_error("scancel " + job + ": " + reason(result));
  }

  [[nodiscard]] std::string describe() const {
    return "Slurm" + (options_.partition.empty() ? std::string() : " (partition " + options_.partition + ")");
  }

 private:
  [[nodiscard]] std::vector<std::string> sbatch_arguments(const WorkerLaunch& launch, const std::string& name,
                                                          std::string_view job_pattern) const {
    std::vector<std::string> arguments = {"--parsable", "--job-name=" + name};
    arguments.push_back("--output=" +
                        (options_.log_directory.empty()
                             ? std::string("/dev/null")
                             : (options_.log_directory / (name + "-" + std::string(job_pattern) + ".log")).string()));
    std::string exported;
    for (const std::string& variable : options_.passed_variables) {
      if (tools_.get(variable) && !launch.environment.contains(variable))
        exported += (exported.empty() ? "" : ",") + variable;
    }
    for (const auto& [variable, value] : launch.environment) exported += (exported.empty() ? "" : ",") + variable;
    // An empty list would be read as a variable's name; NONE passes SLURM_* only.
    arguments.push_back("--export=" + (exported.empty() ? std::string("NONE") : exported));
    if (!options_.partition.empty()) arguments.push_back("--partition=" + options_.partition);
    if (launch.gpus > 0) {
      arguments.push_back("--gres=" + options_.gpu_resource + ":" +
                          std::to_string(static_cast<long>(std::ceil(launch.gpus))));
    }
    if (launch.cpus > 0)
      arguments.push_back("--cpus-per-task=" + std::to_string(static_cast<long>(std::ceil(launch.cpus))));
    arguments.insert(arguments.end(), options_.sbatch_arguments.begin(), options_.sbatch_arguments.end());
    return arguments;
  }

  /// A POSIX shell script that execs task i's command (`exec`: the worker itself gets
  /// scancel's SIGTERM and deregisters).
  [[nodiscard]] static std::string batch_script(std::span<const WorkerLaunch> launches) {
    std::string script = "#!/bin/sh\n";
    if (launches.size() == 1) return script + detail::exec_shell_line(launches.front().command) + "\n";
    script += "case \"$SLURM_ARRAY_TASK_ID\" in\n";
    for (std::size_t task = 0; task < launches.size(); ++task) {
      script += "  " + std::to_string(task) + ") " + detail::exec_shell_line(launches[task].command) + " ;;\n";
    }
    return script + "esac\necho \"no worker for array task $SLURM_ARRAY_TASK_ID\" >&2\nexit 2\n";
  }

  /// The job id `sbatch --parsable` prints ("<id>" or "<id>;<cluster>").
  [[nodiscard]] static std::string submitted_id(const ProcessResult& result) {
    const std::string output = trimmed(result.standard_output.text);
    std::string id = output.substr(0, output.find(';'));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
      throw std::runtime_error("sbatch printed no job id: " + (output.empty() ? reason(result) : output));
    }
    return id;
  }

  ProcessResult run(const std::string& program, std::vector<std::string> arguments, std::string input,
                    const std::map<std::string, std::string>& variables) {
    ProcessResult result = run_unchecked(program, std::move(arguments), std::move(input), variables);
    if (!result.succeeded()) throw std::runtime_error(program + ": " + reason(result));
    return result;
  }

  ProcessResult run_unchecked(const std::string& program, std::vector<std::string> arguments,
                              std::optional<std::string> input = std::nullopt,
                              const std::map<std::string, std::string>& variables = {}) {
    const std::optional<std::filesystem::path> found = find_program(program, tools_);
    if (!found) throw std::runtime_error(program + " is not on the PATH: this machine is no Slurm submit host");
    ProcessSpec spec;
    spec.argv.push_back(found->string());
    for (std::string& argument : arguments) spec.argv.push_back(std::move(argument));
    spec.environment = tools_;
    for (const auto& [variable, value] : variables) spec.environment.set(variable, value);
    spec.stdin_data = std::move(input);
    spec.timeout = options_.command_timeout;
    spec.output_limit = 64 * 1024;
    try {
      return run_process(spec);
    } catch (const ProcessError& error) {
      throw std::runtime_error(program + " could not be started: " + error.what());
    }
  }

  [[nodiscard]] static bool mentions_unknown_job(const ProcessResult& result) {
    const std::string& text = result.standard_error.text;
    return text.find("Invalid job id") != std::string::npos ||
           text.find("already completing or completed") != std::string::npos;
  }

  [[nodiscard]] static std::string reason(const ProcessResult& result) {
    std::string text = trimmed(result.standard_error.text);
    if (text.empty()) text = trimmed(result.standard_output.text);
    return text.empty() ? describe_exit(result) : text + " (" + describe_exit(result) + ")";
  }

  [[nodiscard]] static std::string trimmed(std::string_view text) {
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) return {};
    const std::size_t last = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(first, last - first + 1));
  }

  SlurmJobLauncherOptions options_;
  Environment tools_;
};

static_assert(BatchWorkerLauncher<SlurmJobLauncher>);

}  // namespace cuda_agent
