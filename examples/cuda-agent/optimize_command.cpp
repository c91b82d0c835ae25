// SPDX-License-Identifier: Apache-2.0
// `cuda-agent optimize`: one agent episode on one task, with a model named by a spec string.
#include <cuda_agent/agent/optimize.hpp>
#include <cuda_agent/llm/llm_spec.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#ifdef CUDA_AGENT_CLI_WITH_HTTP
#include <cuda_agent/http/make_client.hpp>
#endif

#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "commands.hpp"
#include "episode_summary.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* optimize_help = R"(usage: cuda-agent optimize <task> --llm <spec> [options]

Runs one agent episode: the task is materialized into a workspace, the model works in it
with Bash, Read, Write, Edit, MultiEdit, Grep, Glob, Compile, Verify and Profile (its
commands confined by bubblewrap), and every verified change is scored by the trusted
evaluation (a pristine copy, rebuilt, verified and, on a GPU, timed against eager PyTorch
and torch.compile). The best candidate is the answer.

arguments:
  <task>              a KernelBench problem file (.py), a workspace directory with model.py,
                      or a CUDA-Agent-Ops-6K JSONL file (choose the row with --row)

options:
  --llm SPEC          the model: openai:<model>[@<base-url>], anthropic:<model>,
                      vllm:<model>@<base-url>, replay:<trajectory.jsonl>, scripted:<file.json>, ...
  --out DIR           where the outputs go (default: cuda-agent-runs/<task>-<time>):
                      best/ (the best candidate), report.md, report.json, trajectory.jsonl,
                      workspace/, work/
  --device auto|cuda|cpu
                      where candidates run (default auto: cuda when an NVIDIA GPU is present);
                      cpu evaluates C++ CPU extensions and cannot time (reward at most 1)
  --row N             the row of an Ops-6K JSONL file (0-based)
  --max-turns N       model answers before the episode stops (default 200)
  --wall-time S       seconds before the episode stops
  --max-cost USD      money before the episode stops (needs a backend that reports cost)
  --context-tokens N  the model's context window (default 131072)
  --max-output-tokens N
  --temperature T
  --no-timing         do not time candidates (rewards above 1 need timing)
  --timing-seconds S  time for each timing comparison (default 5)
  --gpu N             the GPU to use (device minor, default 0)
  --python PATH       Python with torch (default $CUDA_AGENT_PYTHON or python3)
  --cache-dir DIR     the compile driver's object cache
  --resume            continue the episode whose trajectory is in --out
  --unconfined        run the model's commands WITHOUT bubblewrap; for trusted models only
  --quiet             no progress lines
  -h, --help          this text

exit status: 0 a correct candidate was found, 1 none was, 2 usage error, 3 the run failed
)";

struct OptimizeCommandOptions {
  std::filesystem::path task;
  std::optional<int> row;
  std::string llm;
  std::filesystem::path out;
  bool quiet = false;
  OptimizeOptions run;
};

double to_positive(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value > 0)) throw UsageError(option + " expects a positive number, not '" + text + "'");
  return value;
}

OptimizeCommandOptions parse(std::span<const std::string> arguments) {
  OptimizeCommandOptions options;
  std::vector<std::string> positional;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= arguments.size()) throw UsageError(argument + " needs a value");
      return arguments[++i];
    };
    if (argument == "-h" || argument == "--help") throw UsageError("");
    if (argument == "--llm") {
      options.llm = value();
    } else if (argument == "--out") {
      options.out = value();
    } else if (argument == "--device") {
      options.run.device = value();
      if (options.run.device != "auto" && options.run.device != "cuda" && options.run.device != "cpu")
        throw UsageError("--device is auto, cuda or cpu, not '" + options.run.device + "'");
    } else if (argument == "--row") {
      options.row = parse_whole_number(argument, value(), 0, 100'000'000);
    } else if (argument == "--max-turns") {
      options.run.agent.budget.max_turns = parse_whole_number(argument, value(), 1, 100'000);
    } else if (argument == "--wall-time") {
      options.run.agent.budget.wall_time = std::chrono::seconds(parse_whole_number(argument, value(), 1, 10'000'000));
    } else if (argument == "--max-cost") {
      options.run.agent.budget.max_cost_usd = to_positive(argument, value());
    } else if (argument == "--context-tokens") {
      options.run.agent.context.window_tokens = parse_whole_number(argument, value(), 1024, 100'000'000);
    } else if (argument == "--max-output-tokens") {
      options.run.agent.max_output_tokens = parse_whole_number(argument, value(), 1, 10'000'000);
    } else if (argument == "--temperature") {
      options.run.agent.temperature = to_positive(argument, value());
    } else if (argument == "--no-timing") {
      options.run.timing = false;
    } else if (argument == "--timing-seconds") {
      options.run.timing_seconds = to_positive(argument, value());
    } else if (argument == "--gpu") {
      options.run.gpu = parse_whole_number(argument, value(), 0, 255);
    } else if (argument == "--python") {
      options.run.python = value();
    } else if (argument == "--cache-dir") {
      options.run.compile_cache_directory = value();
    } else if (argument == "--resume") {
      options.run.resume = true;
    } else if (argument == "--unconfined") {
      options.run.unconfined = true;
    } else if (argument == "--quiet") {
      options.quiet = true;
    } else if (!argument.empty() && argument[0] == '-') {
      throw UsageError("unknown option " + argument);
    } else {
      positional.push_back(argument);
    }
  }
  if (positional.size() != 1)
    throw UsageError("expected one task (a .py file, a workspace directory or a JSONL file), got " +
                     std::to_string(positional.size()) + " arguments");
  if (options.llm.empty())
    throw UsageError(
        "say which model works on the task with --llm (for example --llm openai:gpt-4.1, or "
        "--llm replay:runs/earlier/trajectory.jsonl)");
  options.task = positional[0];
  if (!std::filesystem::exists(options.task)) throw UsageError("there is no task at " + options.task.string());
  if (options.run.resume && options.out.empty()) throw UsageError("--resume needs the --out directory of the episode");
  return options;
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

int optimize_command(std::span<const std::string> arguments) {
  OptimizeCommandOptions options;
  Task task;
  try {
    options = parse(arguments);
    task = load_any_task(options.task, options.row);
  } catch (const UsageError& error) {
    if (std::string(error.what()).empty()) {
      std::cout << optimize_help;
      return 0;
    }
    std::cerr << "cuda-agent optimize: " << error.what() << "\n\n(see cuda-agent optimize --help)\n";
    return 2;
  }
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

}  // namespace cuda_agent::cli
