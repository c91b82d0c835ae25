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
#include <span>
#include <string>
#include <vector>

#include "commands.hpp"
#include "episode_summary.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* demo_help = R"(usage: cuda-agent demo [--out DIR] [--device auto|cuda|cpu] [options]

Plays a bundled episode on KernelBench level2/14_Gemm_Divide_Sum_Scaling. The model's
answers are recorded; everything they trigger really runs: the agent loop, the bubblewrap
sandbox, the compile driver, the harness verifier, the profiler and the trusted
evaluation. The model profiles the reference, writes a fused kernel (the sum over the
GEMM's columns folds into x . colsum(W) * s / 2), hits a compile error, fixes it, fails
verification once (a forgotten / 2), fixes it, profiles, improves the kernel and finishes.

On a GPU (device cuda) the kernels are CUDA and the result is timed against eager PyTorch
and torch.compile: on an H200 the episode should end with reward 3. Without a GPU the
same story runs on the CPU (C++ CPU extensions, smaller sizes): the compile error, the
verification failure, the fixes and the trusted scoring are real, but nothing is timed,
so the reward is at most 1.

options:
  --out DIR           where the outputs go (default: cuda-agent-demo)
  --device auto|cuda|cpu
                      default auto: cuda when an NVIDIA GPU is present
  --timing-seconds S  time for each timing comparison on the GPU (default 5)
  --gpu N             the GPU to use (device minor, default 0)
  --python PATH       Python with torch (default $CUDA_AGENT_PYTHON or python3)
  --cache-dir DIR     the compile driver's object cache
  --unconfined        run the model's commands WITHOUT bubblewrap
  --quiet             no progress lines
  -h, --help          this text

exit status: 0 the episode went as recorded and found a correct candidate, 1 it did not,
2 usage error, 3 the run failed
)";

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

}  // namespace

int demo_command(std::span<const std::string> arguments) {
  OptimizeOptions run;
  run.output_directory = "cuda-agent-demo";
  run.timing_seconds = 5.0;
  bool quiet = false;
  try {
    for (std::size_t i = 0; i < arguments.size(); ++i) {
      const std::string& argument = arguments[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= arguments.size()) throw UsageError(argument + " needs a value");
        return arguments[++i];
      };
      if (argument == "-h" || argument == "--help") {
        std::cout << demo_help;
        return 0;
      }
      if (argument == "--out") {
        run.output_directory = value();
      } else if (argument == "--device") {
        run.device = value();
        if (run.device != "auto" && run.device != "cuda" && run.device != "cpu")
          throw UsageError("--device is auto, cuda or cpu, not '" + run.device + "'");
      } else if (argument == "--timing-seconds") {
        run.timing_seconds = parse_whole_number(argument, value(), 1, 3600);
      } else if (argument == "--gpu") {
        run.gpu = parse_whole_number(argument, value(), 0, 255);
      } else if (argument == "--python") {
        run.python = value();
      } else if (argument == "--cache-dir") {
        run.compile_cache_directory = value();
      } else if (argument == "--unconfined") {
        run.unconfined = true;
      } else if (argument == "--quiet") {
        quiet = true;
      } else {
        throw UsageError("unknown argument " + argument);
      }
    }
    run.device = resolve_device(run.device, run.gpu);
    run.python = python_for_harness(run.python);
  } catch (const std::exception& error) {
    std::cerr << "cuda-agent demo: " << error.what() << "\n\n(see cuda-agent demo --help)\n";
    return 2;
  }

  const std::filesystem::path output = std::filesystem::absolute(run.output_directory).lexically_normal();
  if (std::filesystem::exists(output / "trajectory.jsonl")) {
    std::cerr << "cuda-agent demo: " << output.string()
              << " already holds a demo run; remove it or choose another --out\n";
    return 2;
  }
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
  if (!quiet) {
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

}  // namespace cuda_agent::cli
