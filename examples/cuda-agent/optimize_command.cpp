// SPDX-License-Identifier: Apache-2.0
// `cuda-agent optimize`: one agent episode on one task, with a model named by a spec string.
#include <cuda_agent/agent/optimize.hpp>
#include <cuda_agent/llm/llm_spec.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#ifdef CUDA_AGENT_CLI_WITH_HTTP
#include <cuda_agent/http/make_client.hpp>
#endif

#include <cctype>      // isalnum
#include <chrono>      // system_clock, seconds
#include <ctime>       // strftime, localtime
#include <filesystem>  // path, exists
#include <iostream>    // cout, cerr
#include <memory>      // make_shared
#include <optional>    // optional
#include <string>      // string
#include <vector>      // vector

#include "command_line.hpp"
#include "commands.hpp"
#include "episode_summary.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* optimize_description =
    R"(Runs one agent episode: the task is materialized into a workspace, the model works in it
with Bash, Read, Write, Edit, MultiEdit, Grep, Glob, Compile, Verify and Profile (its
commands confined by bubblewrap), and every verified change is scored by the trusted
evaluation (a pristine copy, rebuilt, verified and, on a GPU, timed against eager PyTorch
and torch.compile). The best candidate is the answer. Outputs: best/ (the best candidate),
report.md, report.json, trajectory.jsonl, workspace/, work/.)";

struct OptimizeCommandOptions {
  std::filesystem::path task;
  std::optional<int> row;
  std::string llm;
  std::filesystem::path out;
  bool quiet = false;
  bool no_timing = false;
  OptimizeOptions run;
};

void add_optimize_options(CLI::App& command, OptimizeCommandOptions& o) {
  command
      .add_option("task", o.task,
                  "a KernelBench problem file (.py), a workspace directory with model.py, or a CUDA-Agent-Ops-6K "
                  "JSONL file (choose the row with --row)")
      ->type_name("TASK");
  command
      .add_option("--llm", o.llm,
                  "the model: openai:<model>[@<base-url>], anthropic:<model>, vllm:<model>@<base-url>, "
                  "replay:<trajectory.jsonl>, scripted:<file.json>, ...")
      ->type_name("SPEC");
  command.add_option("--out", o.out, "where the outputs go (default: cuda-agent-runs/<task>-<time>)")->type_name("DIR");
  add_episode_environment_options(command, o.run);
  command
      .add_option_function<int>(
          "--row", [&o](const int& row) { o.row = row; }, "the row of an Ops-6K JSONL file (0-based)")
      ->check(whole_number(0, 100'000'000));
  command
      .add_option("--max-turns", o.run.agent.budget.max_turns, "model answers before the episode stops (default 200)")
      ->check(whole_number(1, 100'000));
  command
      .add_option_function<int>(
          "--wall-time", [&o](const int& seconds) { o.run.agent.budget.wall_time = std::chrono::seconds(seconds); },
          "seconds before the episode stops")
      ->check(whole_number(1, 10'000'000));
  command
      .add_option_function<double>(
          "--max-cost", [&o](const double& usd) { o.run.agent.budget.max_cost_usd = usd; },
          "money (USD) before the episode stops (needs a backend that reports cost)")
      ->check(positive_number());
  command
      .add_option("--context-tokens", o.run.agent.context.window_tokens, "the model's context window (default 131072)")
      ->check(whole_number(1024, 100'000'000));
  command
      .add_option_function<int>(
          "--max-output-tokens", [&o](const int& tokens) { o.run.agent.max_output_tokens = tokens; },
          "the most tokens of one answer")
      ->check(whole_number(1, 10'000'000));
  command
      .add_option_function<double>(
          "--temperature", [&o](const double& temperature) { o.run.agent.temperature = temperature; },
          "the model's sampling temperature")
      ->check(positive_number());
  command.add_flag("--no-timing", o.no_timing, "do not time candidates (rewards above 1 need timing)");
  command.add_option("--timing-seconds", o.run.timing_seconds, "time for each timing comparison (default 5)")
      ->check(positive_number())
      ->type_name("S");
  command.add_flag("--resume", o.run.resume, "continue the episode whose trajectory is in --out");
  command.add_flag("--quiet", o.quiet, "no progress lines");
}

/// What CLI11 cannot check: that there is a task and a model, and --resume's directory.
void complete(OptimizeCommandOptions& options) {
  if (options.task.empty()) throw UsageError("expected one task (a .py file, a workspace directory or a JSONL file)");
  if (options.llm.empty())
    throw UsageError(
        "say which model works on the task with --llm (for example --llm openai:gpt-4.1, or "
        "--llm replay:runs/earlier/trajectory.jsonl)");
  if (!std::filesystem::exists(options.task)) throw UsageError("there is no task at " + options.task.string());
  if (options.run.resume && options.out.empty()) throw UsageError("--resume needs the --out directory of the episode");
  if (options.no_timing) options.run.timing = false;
}

Task load_any_task(const std::filesystem::path& path, std::optional<int> row) {
  if (path.extension() == ".jsonl") {
    std::vector<Task> tasks = load_ops6k_tasks(path);
    if (tasks.empty()) throw UsageError(path.string() + " holds no task");
    if (!row) {
      if (tasks.size() > 1)
        throw UsageError(path.string() + " holds " + std::to_string(tasks.size()) + " tasks: choose one with --row N");
      row = 0;
    }
    if (static_cast<std::size_t>(*row) >= tasks.size())
      throw UsageError("--row " + std::to_string(*row) + " is past the end of " + path.string() + " (" +
                       std::to_string(tasks.size()) + " rows)");
    return tasks[static_cast<std::size_t>(*row)];
  }
  if (row) throw UsageError("--row applies to JSONL task files only");
  return load_task(path);
}

std::filesystem::path default_output(const Task& task) {
  std::string name = task.name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return std::filesystem::path("cuda-agent-runs") / (name + "-" + stamp);
}

}  // namespace

AnyLlmClient client_from_spec(const std::string& spec) {
#ifdef CUDA_AGENT_CLI_WITH_HTTP
  return http::make_llm_client(spec);
#else
  return make_llm_client(spec);
#endif
}

namespace {

int run_optimize(OptimizeCommandOptions& options) {
  complete(options);
  const Task task = load_any_task(options.task, options.row);
  AnyLlmClient client = client_from_spec(options.llm);
  options.run.python = python_for_harness(options.run.python);
  options.run.output_directory = options.out.empty() ? default_output(task) : options.out;
  TerminalProgress progress(std::cerr);
  if (!options.quiet) {
    options.run.progress = [](std::string_view line) { std::cerr << "  ... " << line << std::endl; };
    options.run.observers.push_back(&progress);
  }
  const std::string device = resolve_device(options.run.device, options.run.gpu);
  std::cout << "task       " << task.name << "\nmodel      " << client.name() << "\ndevice     " << device
            << "\noutputs    " << std::filesystem::absolute(options.run.output_directory).string() << "\n"
            << std::flush;
  const OptimizeResult result = optimize(task, std::move(client), std::move(options.run));
  print_episode_summary(result, std::cout);
  return result.episode.best && result.episode.best->evaluation.correct() ? 0 : 1;
}

}  // namespace

void add_optimize_command(CLI::App& program, int& exit_status) {
  auto options = std::make_shared<OptimizeCommandOptions>();
  CLI::App* command = program.add_subcommand(
      "optimize", "let a model optimize a task: an agent episode with trusted scoring, reports and trajectory");
  command->footer(std::string(optimize_description) +
                  "\n\nexit status: 0 a correct candidate was found, 1 none was, 2 usage error, 3 the run failed");
  add_optimize_options(*command, *options);
  command->callback([options, &exit_status] { exit_status = run_optimize(*options); });
}

}  // namespace cuda_agent::cli
