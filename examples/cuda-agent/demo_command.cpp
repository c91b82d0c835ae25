// SPDX-License-Identifier: Apache-2.0
// `cuda-agent demo`: a bundled episode, replayed through the real loop, sandbox, compiler,
// verifier and profiler.
#include <cuda_agent/agent/optimize.hpp>
#include <cuda_agent/llm/replay_client.hpp>
#include <cuda_agent/resources.hpp>
#include <cuda_agent/tasks/task_loader.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "commands.hpp"
#include "episode_summary.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* demo_description =
    R"(Plays a bundled episode on KernelBench level2/14_Gemm_Divide_Sum_Scaling. The model's
answers are recorded; everything they trigger really runs: the agent loop, the bubblewrap
sandbox, the compile driver, the harness verifier, the profiler and the trusted
evaluation. The model profiles the reference, writes a fused kernel (the sum over the
GEMM's columns folds into x . colsum(W) * s / 2), hits a compile error, fixes it, fails
verification once (a forgotten / 2), fixes it, profiles, improves the kernel and finishes.

On a GPU (device cuda) the kernels are CUDA and the result is timed against eager PyTorch
and torch.compile: on an H200 the episode should end with reward 3. Without a GPU the
same story runs on the CPU (C++ CPU extensions, smaller sizes): the compile error, the
verification failure, the fixes and the trusted scoring are real, but nothing is timed,
so the reward is at most 1.)";

struct DemoOptions {
  OptimizeOptions run;
  bool quiet = false;
};

void add_demo_options(CLI::App& command, DemoOptions& o) {
  command.add_option("--out", o.run.output_directory, "where the outputs go (default: cuda-agent-demo)");
  add_episode_environment_options(command, o.run);
  command
      .add_option("--timing-seconds", o.run.timing_seconds, "time for each timing comparison on the GPU (default 5)")
      ->check(whole_number(1, 3600))
      ->type_name("S");
  command.add_flag("--quiet", o.quiet, "no progress lines");
}

/// Lends a ReplayClient to the loop and keeps it readable afterwards (its divergences).
struct SharedReplay {
  std::shared_ptr<ReplayClient> replay;
  ChatResponse complete(const ChatRequest& request) { return replay->complete(request); }
  [[nodiscard]] std::string_view name() const { return replay->name(); }
};

void write_text(const std::filesystem::path& path, std::string_view text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream stream(path, std::ios::binary | std::ios::trunc);
  stream << text;
  if (!stream) throw std::runtime_error("cannot write " + path.string());
}

std::string_view bundled(const std::string& path) {
  const auto text = embedded_resource(path);
  if (!text) throw std::runtime_error("the bundled " + path + " is missing from this build");
  return *text;
}

int run_demo(DemoOptions& options) {
  OptimizeOptions& run = options.run;
  run.device = resolve_device(run.device, run.gpu);
  run.python = python_for_harness(run.python);
  const std::filesystem::path output = std::filesystem::absolute(run.output_directory).lexically_normal();
  if (std::filesystem::exists(output / "trajectory.jsonl"))
    throw UsageError(output.string() + " already holds a demo run; remove it or choose another --out");
  const bool cuda = run.device == "cuda";
  const std::filesystem::path task_file = output / "task" / "level2" / "14_Gemm_Divide_Sum_Scaling.py";
  write_text(task_file, bundled("demo/" + run.device + "/task.py"));
  const std::filesystem::path recording = output / "recorded" / "trajectory.jsonl";
  write_text(recording, bundled("demo/" + run.device + "/trajectory.jsonl"));
  const Task task = load_kernelbench_task(task_file);

  std::cout << "cuda-agent demo: a recorded model works on KernelBench " << task.name << ";\n"
            << "everything it does runs for real here (sandbox, compiler, verifier, " << (cuda ? "profiler, " : "")
            << "trusted evaluation).\n";
  if (!cuda)
    std::cout << "No GPU here: this is the CPU form of the demo (the same story with C++ CPU extensions and\n"
                 "smaller sizes: batch 128, 1024 x 1024 weights). Timing needs a GPU.\n";
  std::cout << "outputs    " << output.string() << "\n" << std::flush;

  auto replay = std::make_shared<ReplayClient>(recording);
  TerminalProgress progress(std::cerr);
  if (!options.quiet) {
    run.progress = [](std::string_view line) { std::cerr << "  ... " << line << std::endl; };
    run.observers.push_back(&progress);
  }
  run.agent.max_output_tokens = 4096;
  const OptimizeResult result = optimize(task, SharedReplay{replay}, std::move(run));
  print_episode_summary(result, std::cout);

  std::size_t structural = 0;
  for (const ReplayDivergence& divergence : replay->divergences()) {
    if (divergence.kind != ReplayDivergence::Kind::structure) continue;
    if (++structural <= 5)
      std::cout << "divergence turn " << divergence.turn + 1 << ": " << divergence.detail << " (recorded "
                << divergence.expected << ", now " << divergence.actual << ")\n";
  }
  std::cout << "replay     "
            << (structural == 0 ? "every tool call succeeded or failed as recorded"
                                : std::to_string(structural) + " tool call(s) went otherwise than recorded")
            << "\n";
  if (!cuda)
    std::cout
        << "needs GPU  timing against eager PyTorch and torch.compile, and rewards 2 and 3. On a machine with an\n"
           "           NVIDIA GPU, `cuda-agent demo --device cuda` runs the CUDA form; on an H200 it should end\n"
           "           with reward 3 (the final kernel beats eager and torch.compile).\n";
  const bool correct = result.episode.best && result.episode.best->evaluation.correct();
  return correct && structural == 0 ? 0 : 1;
}

}  // namespace

void add_demo_command(CLI::App& program, int& exit_status) {
  auto options = std::make_shared<DemoOptions>();
  options->run.output_directory = "cuda-agent-demo";
  options->run.timing_seconds = 5.0;
  CLI::App* command = program.add_subcommand(
      "demo", "replay a bundled episode through the real sandbox, compiler, verifier and profiler");
  command->footer(std::string(demo_description) +
                  "\n\nexit status: 0 the episode went as recorded and found a correct candidate, 1 it did not, 2 "
                  "usage error, 3 the run failed");
  add_demo_options(*command, *options);
  command->callback([options, &exit_status] { exit_status = run_demo(*options); });
}

}  // namespace cuda_agent::cli
