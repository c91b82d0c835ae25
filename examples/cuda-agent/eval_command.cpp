// SPDX-License-Identifier: Apache-2.0
// `cuda-agent eval`: the trusted evaluation of one candidate, as the reward sees it.
#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
#include <cuda_agent/profile/profile_report.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/tasks/kernelbench_generation.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>
#include <cuda_agent/verify/verification_summary.hpp>

#include <chrono>      // seconds, milliseconds
#include <cstdint>     // uint32_t
#include <filesystem>  // path
#include <fstream>     // ofstream
#include <functional>  // function
#include <iostream>    // cout, cerr
#include <memory>      // shared_ptr
#include <optional>    // optional
#include <stdexcept>   // runtime_error
#include <string>      // string
#include <vector>      // vector

#include <unistd.h>  // geteuid, getpid

#include "command_line.hpp"
#include "commands.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* eval_description =
    R"(Evaluates a candidate the way its reward is computed: its sources (model_new.py and
kernels/, nothing else) are copied into a fresh directory, checked statically, built with
the compile driver, verified against the task's reference by the sandboxed evaluation
harness, and, when correct, timed against eager PyTorch and torch.compile (interleaved
rounds; speedups with confidence intervals and FASTER/SLOWER/SAME/AMBIGUOUS verdicts).
Prints a summary with the reward; --json writes the full result.

The candidate may also be a KernelBench generation: one .py file that builds its extension
with torch.utils.cpp_extension.load_inline (or load, with the source files beside it). Its
sources are read from the file's text without running it, built by the compile driver
instead of load_inline, and evaluated like any candidate; build flags are not applied.)";

struct EvalOptions {
  std::filesystem::path task;
  std::filesystem::path candidate;
  std::string device;
  std::string json;  // empty: none
  bool strict = false;
  int input_sets = 5;
  int runs = 2;
  std::string seeds_list;
  std::vector<std::uint32_t> seeds;
  std::string init_seed_text;
  std::optional<std::uint32_t> init_seed;
  std::string mode = "eval";
  bool no_static_checks = false;
  int timeout_seconds = 300;
  std::filesystem::path python;
  std::filesystem::path cache_directory;
  std::filesystem::path work_directory;
  int gpu = 0;
  bool unconfined = false;
  bool prepared_children = false;
  bool quiet = false;
  bool no_profile = false;
  std::string reward = "milestone";
  double threshold = 0.05;
  double timing_seconds = 5.0;
  std::string compile_mode = "default";
};

void add_eval_options(CLI::App& command, EvalOptions& o) {
  command.add_option("task", o.task, "a KernelBench problem file (.py) or a workspace directory with model.py")
      ->required();
  command
      .add_option("candidate", o.candidate,
                  "a directory with model_new.py and kernels/ (an agent's workspace), or a KernelBench generation "
                  "(one .py file that calls load_inline)")
      ->required()
      ->type_name("DIR|FILE.py");
  command
      .add_option("--device", o.device,
                  "cpu or cuda (default: cuda when an NVIDIA GPU is present; cpu evaluates C++ CPU extensions)")
      ->check(one_of({"cpu", "cuda"}))
      ->type_name("cpu|cuda");
  command.add_option("--json", o.json, "write the full evaluation as JSON to FILE (\"-\": standard output)")
      ->type_name("FILE");
  command.add_flag("--strict", o.strict,
                   "KernelBench's tolerances (fp32 and fp64 1e-4, half 1e-2) instead of the paper's (1e-2)");
  command.add_option("--input-sets", o.input_sets, "input sets, each from a fresh seed (default 5)")
      ->check(whole_number(1, 1000))
      ->type_name("N");
  command.add_option("--runs", o.runs, "calls per input set that must all match (default 2)")
      ->check(whole_number(1, 100))
      ->type_name("N");
  command.add_option("--seeds", o.seeds_list, "fixed seeds A,B,..., to reproduce an earlier verification")
      ->type_name("A,B,...");
  command.add_option("--init-seed", o.init_seed_text, "fixed seed of the weights")->type_name("N");
  command.add_option("--mode", o.mode, "the module state of Model and ModelNew: eval (default) or train")
      ->check(one_of({"eval", "train"}))
      ->type_name("eval|train");
  command.add_flag("--no-static-checks", o.no_static_checks, "skip the scans of model_new.py and the C++ sources");
  command.add_option("--timeout", o.timeout_seconds, "limit of the verification in seconds (default 300)")
      ->check(whole_number(1, 86400))
      ->type_name("SECONDS");
  command.add_flag("--no-profile", o.no_profile, "skip the timing (the reward is then at most 1)");
  command.add_option("--reward", o.reward, "milestone (the paper's -1/1/2/3, default) or speedup (over torch.compile)")
      ->check(one_of({"milestone", "speedup"}))
      ->type_name("milestone|speedup");
  command.add_option("--threshold", o.threshold, "how much faster FASTER means (default 0.05)")
      ->check(fraction())
      ->type_name("FRACTION");
  command.add_option("--timing-seconds", o.timing_seconds, "time for the interleaved timing rounds (default 5)")
      ->check(whole_number(1, 3600))
      ->type_name("S");
  command.add_option("--compile-mode", o.compile_mode, "torch.compile mode of the baseline (default \"default\")")
      ->type_name("MODE");
  command.add_option("--python", o.python, "Python with torch for the harness (default $CUDA_AGENT_PYTHON or python3)")
      ->type_name("PATH");
  command.add_option("--cache-dir", o.cache_directory, "the compile driver's object cache")->type_name("DIR");
  command
      .add_option("--work-dir", o.work_directory,
                  "keep the evaluation's files under DIR; the baseline timings are cached there too, so later "
                  "runs with the same DIR skip compiling the reference")
      ->type_name("DIR");
  command.add_option("--gpu", o.gpu, "the GPU to use (device minor, default 0)")
      ->check(whole_number(0, 255))
      ->type_name("N");
  command.add_flag("--unconfined", o.unconfined,
                   "build and run WITHOUT bubblewrap (ProcessSandbox); for trusted code only");
  command.add_flag("--prepared-children", o.prepared_children,
                   "keep a process with CUDA started ready for each request (saves 0.2 to 0.5 s a request; costs "
                   "two more CUDA contexts, about 1 GB of device memory, while one runs)");
  command.add_flag("--quiet", o.quiet, "no progress lines");
}

/// What CLI11 cannot check: the files named, the seeds, and what follows from them.
void complete(EvalOptions& options) {
  if (!std::filesystem::exists(options.task)) throw UsageError("no task at " + options.task.string());
  if (!std::filesystem::is_directory(options.candidate) &&
      !(std::filesystem::is_regular_file(options.candidate) && options.candidate.extension() == ".py"))
    throw UsageError(options.candidate.string() +
                     " is neither a directory (with model_new.py and kernels/) nor a generation (a .py file)");
  if (!options.seeds_list.empty()) options.seeds = seeds_from("--seeds", options.seeds_list);
  if (!options.init_seed_text.empty()) options.init_seed = seed_from("--init-seed", options.init_seed_text);
  if (options.seeds.size() > static_cast<std::size_t>(options.input_sets))
    options.input_sets = static_cast<int>(options.seeds.size());
  if (options.device.empty())
    options.device = std::filesystem::exists("/dev/nvidia" + std::to_string(options.gpu)) ? "cuda" : "cpu";
  options.python = python_for_harness(options.python);
}

double seconds(std::chrono::milliseconds duration) { return static_cast<double>(duration.count()) / 1000.0; }

std::string fixed(double value) {
  std::string text = std::to_string(value);
  return text.substr(0, text.find('.') + 2);
}

void print_summary(const Task& task, const EvalOptions& options, const Evaluation& evaluation, std::ostream& out) {
  out << "task       " << task.name << "\n"
      << "candidate  " << options.candidate.string() << "\n"
      << "device     " << options.device;
  if (evaluation.verification && evaluation.verification->details.contains("device_name"))
    out << " (" << evaluation.verification->details["device_name"].get<std::string>() << ")";
  out << "\n";
  const CompileResult& compile = evaluation.compile;
  if (compile.succeeded) {
    out << "build      ok in " << fixed(seconds(compile.duration)) << " s (" << compile.objects_compiled
        << " compiled, " << compile.objects_reused << " from the cache)\n";
  } else if (!compile.log.empty() && compile.diagnostics.empty() && compile.duration.count() == 0) {
    out << "build      " << compile.log << "\n";
  } else {
    out << "build      FAILED in " << fixed(seconds(compile.duration)) << " s\n";
    std::size_t shown = 0;
    for (const Diagnostic& diagnostic : compile.diagnostics) {
      if (diagnostic.severity != DiagnosticSeverity::error || ++shown > 10) continue;
      out << "           " << diagnostic.file << ":" << diagnostic.line << ": " << diagnostic.message << "\n";
    }
    if (shown == 0 && !compile.log.empty())
      out << compile.log.substr(compile.log.size() > 2000 ? compile.log.size() - 2000 : 0) << "\n";
  }
  if (evaluation.verification) {
    std::string text = describe_verification(*evaluation.verification);
    std::string indented;
    for (std::size_t start = 0; start < text.size();) {
      const std::size_t end = text.find('\n', start);
      indented += (start == 0 ? "" : "           ") + text.substr(start, end - start) + "\n";
      if (end == std::string::npos) break;
      start = end + 1;
    }
    out << "verify     " << indented;
    if (evaluation.verification->duration.count() > 0)
      out << "           (" << fixed(seconds(evaluation.verification->duration)) << " s)\n";
  }
  if (evaluation.profile) {
    std::string text = describe_profile(*evaluation.profile);
    std::string indented;
    for (std::size_t start = 0; start < text.size();) {
      const std::size_t end = text.find('\n', start);
      if (end == start) break;
      indented += (start == 0 ? "" : "           ") + text.substr(start, end - start) + "\n";
      if (end == std::string::npos) break;
      start = end + 1;
    }
    out << "profile    " << indented;
  }
  out << "result     " << (evaluation.correct() ? "CORRECT" : "NOT CORRECT") << "\n";
}

Reward reward_of(const EvalOptions& options, const Evaluation& evaluation) {
  if (options.reward == "speedup") return SpeedupReward{}.reward(evaluation);
  return MilestoneReward{}.reward(evaluation);
}

template <Sandbox S>
Evaluation evaluate_with(std::shared_ptr<CompileDriver<S>> compiler, HarnessOptions harness, VerificationPolicy policy,
                         TrustedEvaluatorOptions evaluator_options, std::optional<HarnessProfilerOptions> timing,
                         const Task& task, const std::filesystem::path& candidate) {
  // One pair of warm workers verifies and then times (the profiler borrows the verifier's).
  auto verifier = std::make_shared<HarnessVerifier>(std::move(harness), std::move(policy));
  std::optional<AnyProfiler> profiler;
  if (timing) profiler.emplace(HarnessProfiler(std::move(*timing), WorkerTimingLauncher(verifier)));
  TrustedEvaluator<SharedVerifier<HarnessVerifier>, S> evaluator(std::move(compiler),
                                                                 SharedVerifier<HarnessVerifier>(verifier),
                                                                 std::move(profiler), std::move(evaluator_options));
  return evaluator.evaluate(task, candidate);
}

int run_eval(EvalOptions& options) {
  complete(options);
  const Task task = load_task(options.task);
  std::function<void(std::string_view)> progress;
  if (!options.quiet) progress = [](std::string_view line) { std::cerr << "  ... " << line << std::endl; };

  const bool keep = !options.work_directory.empty();
  const std::filesystem::path work =
      keep ? std::filesystem::absolute(options.work_directory)
           : std::filesystem::temp_directory_path() / ("cuda-agent-eval-" + std::to_string(::getpid()));
  detail::make_open_directory(work);
  struct Cleanup {
    std::filesystem::path path;
    bool keep;
    ~Cleanup() {
      std::error_code ignored;
      if (!keep) std::filesystem::remove_all(path, ignored);
    }
  } cleanup{work, keep};

  HarnessOptions harness;
  harness.device = options.device;
  harness.python = options.python;
  harness.work_directory = work / "harness";
  harness.gpus = {options.gpu};
  harness.progress = progress;
  harness.prepared_children = options.prepared_children;
  if (options.unconfined)
    harness.sandbox_factory = [](SandboxOptions sandbox) { return AnySandbox(ProcessSandbox(std::move(sandbox))); };
  VerificationPolicy policy;
  policy.input_sets = options.input_sets;
  policy.runs_per_set = options.runs;
  policy.seeds = options.seeds;
  policy.init_seed = options.init_seed;
  policy.model_mode = options.mode;
  policy.static_checks = !options.no_static_checks;
  policy.timeout = std::chrono::seconds(options.timeout_seconds);
  if (options.strict) policy.tolerance = TolerancePolicy::strict();
  TrustedEvaluatorOptions evaluator_options;
  evaluator_options.work_directory = work / "evaluations";
  evaluator_options.keep_directories = keep;
  evaluator_options.progress = progress;
  detail::make_open_directory(evaluator_options.work_directory);

  CompileOptions compile;
  compile.device = options.device;
  compile.python = options.python;
  compile.cache_directory = options.cache_directory;
  compile.gpu_index = options.gpu;
  compile.progress = progress;
  SandboxOptions build_sandbox;
  build_sandbox.workspace = evaluator_options.work_directory;
  if (options.device == "cuda") build_sandbox.gpus = {options.gpu};
  build_sandbox.mounts.push_back(precompiled_header_mount(
      compile.cache_directory.empty() ? default_compile_cache_directory() : compile.cache_directory));
  if (::geteuid() == 0) {
    compile.sandbox_user = sandbox_identity(build_sandbox);
  }

  std::optional<HarnessProfilerOptions> timing;
  if (!options.no_profile) {
    timing.emplace();
    timing->device = options.device;
    timing->device_index = options.gpu;
    timing->compile_mode = options.compile_mode;
    timing->budget.seconds = options.timing_seconds;
    timing->statistics.threshold = options.threshold;
    timing->baseline_cache_directory = work / "baselines";  // kept in the reference worker's scratch
    timing->extra_allowed_operations = policy.extra_allowed_operations;
  }

  if (options.unconfined)
    std::cerr << "cuda-agent eval: --unconfined: the candidate is built and run WITHOUT a sandbox\n";
  AnySandbox sandbox =
      options.unconfined ? AnySandbox(ProcessSandbox(build_sandbox)) : make_default_sandbox(build_sandbox);

  // A generation becomes a candidate directory first; one that cannot is the candidate's failure.
  std::filesystem::path candidate = options.candidate;
  std::optional<GenerationConversion> generation;
  if (!std::filesystem::is_directory(candidate)) {
    if (progress) progress("reading the generation " + candidate.filename().string());
    GenerationConversionOptions conversion;
    conversion.python = options.python;
    generation = convert_kernelbench_generation(sandbox, candidate, conversion);
    candidate = work / "generation";
    if (!generation->rejection) write_candidate_sources(generation->candidate.files, candidate);
  }

  Evaluation evaluation;
  if (generation && generation->rejection) {
    evaluation = refused_evaluation(*generation);
  } else if (options.unconfined) {
    evaluation = evaluate_with(std::make_shared<CompileDriver<ProcessSandbox>>(ProcessSandbox(build_sandbox), compile),
                               harness, policy, evaluator_options, timing, task, candidate);
  } else {
    evaluation = evaluate_with(std::make_shared<CompileDriver<AnySandbox>>(std::move(sandbox), compile), harness,
                               policy, evaluator_options, timing, task, candidate);
  }

  print_summary(task, options, evaluation, std::cout);
  const Reward reward = reward_of(options, evaluation);
  std::cout << describe_reward(reward, options.reward) << "\n";
  if (!options.json.empty()) {
    nlohmann::json document = {
        {"task", {{"name", task.name}, {"content_hash", task.content_hash()}, {"metadata", task.metadata}}},
        {"candidate", std::filesystem::absolute(options.candidate).string()},
        {"device", options.device},
        {"evaluation", evaluation},
        {"reward",
         {{"policy", options.reward},
          {"value", reward.value},
          {"label", reward.label},
          {"explanation", reward.explanation}}},
        {"rejection", evaluation.rejection() ? nlohmann::json(*evaluation.rejection()) : nlohmann::json(nullptr)}};
    if (generation) document["generation"] = describe_conversion(*generation);
    const std::string text = document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (options.json == "-") {
      std::cout << text;
    } else {
      std::ofstream stream(options.json);
      if (!stream) throw std::runtime_error("cannot write " + options.json);
      stream << text;
      std::cout << "json       " << options.json << "\n";
    }
  }
  const std::optional<Rejection> rejection = evaluation.rejection();
  if (rejection && rejection->reason == RejectionReason::harness_error) return 3;
  return evaluation.correct() ? 0 : 1;
}

}  // namespace

void add_eval_command(CLI::App& program, int& exit_status) {
  auto options = std::make_shared<EvalOptions>();
  CLI::App* command = program.add_subcommand(
      "eval", "evaluate a candidate the trusted way: static checks, build, verification, timing, reward");
  command->footer(std::string(eval_description) +
                  "\n\nexit status: 0 correct, 1 rejected (or did not build), 2 usage error, 3 the evaluation "
                  "itself failed");
  add_eval_options(*command, *options);
  command->callback([options, &exit_status] { exit_status = run_eval(*options); });
}

}  // namespace cuda_agent::cli
