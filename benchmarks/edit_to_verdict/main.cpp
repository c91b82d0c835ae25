// SPDX-License-Identifier: Apache-2.0
// Edit-to-verdict latency: after a one-line change to a .cu file, how long until the
// trusted evaluation has compiled, verified and profiled the candidate (warm: workers
// running, precompiled header and object cache filled, baselines cached), against the
// naive flow on the same task in the same run (a full torch.utils.cpp_extension rebuild,
// then a fresh Python process to verify and another to profile with torch.compile).
//
//   cuda_agent_benchmark_edit_to_verdict [--device cuda|cpu] [--edits 3] [--python PATH]
//                                         [--out FILE] [--skip-naive] [--timing-seconds 1]
//
// --timing-seconds is the profiler's budget of interleaved rounds per evaluation (rounds
// stop earlier once the speedups are known to 1%); what a host that wants quick verdicts
// would set, and part of every figure this prints.
//
// Targets (printed, and the exit status): median warm evaluation <= 4 s, and at least 10x
// faster than the naive flow.
#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
#include <cuda_agent/profile/profile_report.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Arguments {
  std::string device;
  int edits = 3;
  fs::path python = CUDA_AGENT_PYTHON;
  fs::path out;
  bool naive = true;
  double timing_seconds = 1.0;
};

Arguments parse(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--device")
      arguments.device = value();
    else if (flag == "--edits")
      arguments.edits = std::stoi(value());
    else if (flag == "--python")
      arguments.python = value();
    else if (flag == "--out")
      arguments.out = value();
    else if (flag == "--skip-naive")
      arguments.naive = false;
    else if (flag == "--timing-seconds")
      arguments.timing_seconds = std::stod(value());
    else if (flag == "--harness")
      value();  // the harness comes from inside the library
    else
      throw std::invalid_argument("unknown option " + flag);
  }
  if (arguments.device.empty()) arguments.device = fs::exists("/dev/nvidia0") ? "cuda" : "cpu";
  return arguments;
}

std::string read_text(const fs::path& path) {
  std::ifstream stream(path);
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::trunc) << text; }

/// Changes the one line the kernel marks ("the benchmark edits this line"), to a value
/// that differs from the last one: a real recompile, the same results.
void edit_one_line(const fs::path& kernel, int edit) {
  static const std::vector<std::string> values{"256", "512", "128", "1024"};
  std::string text = read_text(kernel);
  const std::size_t marker = text.find("// the benchmark edits this line");
  const std::size_t line = text.rfind('\n', marker) + 1;
  const std::size_t equals = text.find('=', line);
  const std::size_t semicolon = text.find(';', equals);
  text.replace(equals + 2, semicolon - equals - 2, values[static_cast<std::size_t>(edit) % values.size()]);
  write_text(kernel, text);
}

struct Phases {
  double total_s = 0;
  std::map<std::string, double> seconds;  // from the evaluator's progress lines
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows as it happens, also in log files
  const Arguments arguments = parse(argc, argv);
  const bool gpu = arguments.device == "cuda";
  const fs::path task_directory = fs::path(CUDA_AGENT_SOURCE_DIR) / "benchmarks" / "edit_to_verdict" / "task";
  const fs::path root = fs::temp_directory_path() / ("cuda-agent-edit-to-verdict-" + std::to_string(::getpid()));
  ca::detail::make_open_directory(root);
  struct Cleanup {
    fs::path root;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(root, ignored);
    }
  } cleanup{root};

  // The agent's workspace: the task's candidate, with the kernels for this device.
  const fs::path workspace = root / "workspace";
  fs::create_directories(workspace / "kernels");
  fs::copy_file(task_directory / "model_new.py", workspace / "model_new.py");
  const fs::path kernels = task_directory / (gpu ? "kernels" : "kernels_cpu");
  for (const auto& entry : fs::directory_iterator(kernels))
    fs::copy_file(entry.path(), workspace / "kernels" / entry.path().filename());
  const fs::path edited = workspace / "kernels" / (gpu ? "swish.cu" : "swish.cpp");
  ca::Task task;
  task.name = "edit_to_verdict/swish";
  task.reference_source = read_text(task_directory / "model.py");
  write_text(workspace / "model.py", task.reference_source);

  // The evaluator as a host sets it up: a compile driver with its caches, warm harness
  // workers for verification and timing, and the milestone reward.
  ca::HarnessOptions harness;
  harness.device = arguments.device;
  harness.python = arguments.python;
  harness.work_directory = root / "harness";
  auto verifier = std::make_shared<ca::HarnessVerifier>(harness);
  ca::SandboxOptions compile_sandbox;
  compile_sandbox.workspace = root;
  ca::CompileOptions compile;
  compile.device = arguments.device;
  compile.python = arguments.python;
  compile.cache_directory = root / "compile-cache";
  if (::geteuid() == 0) compile.sandbox_user = ca::sandbox_identity(compile_sandbox);
  // The benchmark's own candidate: its compiles need no confinement.
  auto compiler = std::make_shared<ca::CompileDriver<ca::ProcessSandbox>>(ca::ProcessSandbox(compile_sandbox), compile);
  ca::HarnessProfilerOptions timing;
  timing.device = arguments.device;
  timing.baseline_cache_directory = root / "baselines";  // kept in the reference worker's scratch
  timing.budget.seconds = arguments.timing_seconds;
  // On the CPU (a smoke run of the same flow) inductor's C++ compile would dominate.
  if (!gpu) timing.compile_backend = "eager";
  ca::HarnessProfiler profiler(timing, ca::WorkerTimingLauncher(verifier));
  Phases current;
  Clock::time_point mark;
  std::string phase;
  ca::TrustedEvaluatorOptions evaluator_options;
  evaluator_options.work_directory = root / "evaluations";
  evaluator_options.progress = [&](std::string_view line) {
    const auto now = Clock::now();
    if (!phase.empty()) current.seconds[phase] += std::chrono::duration<double>(now - mark).count();
    phase = std::string(line);
    mark = now;
  };
  ca::TrustedEvaluator<ca::SharedVerifier<ca::HarnessVerifier>, ca::ProcessSandbox> evaluator(
      compiler, ca::SharedVerifier<ca::HarnessVerifier>(verifier), ca::AnyProfiler(std::move(profiler)),
      evaluator_options);

  auto evaluate = [&](const char* label) {
    current = {};
    phase.clear();
    const auto started = Clock::now();
    const ca::Evaluation evaluation = evaluator.evaluate(task, workspace);
    const auto ended = Clock::now();
    if (!phase.empty()) current.seconds[phase] += std::chrono::duration<double>(ended - mark).count();
    current.total_s = std::chrono::duration<double>(ended - started).count();
    std::printf("  %-10s %6.2f s  (compiled %zu, reused %zu objects", label, current.total_s,
                evaluation.compile.objects_compiled, evaluation.compile.objects_reused);
    for (const auto& [name, seconds] : current.seconds) std::printf("; %s %.2f s", name.c_str(), seconds);
    const ca::Reward reward = ca::MilestoneReward{}.reward(evaluation);
    std::printf(")  reward %g\n", reward.value);
    if (!evaluation.correct()) {
      std::cerr << "the benchmark's candidate was not accepted: " << nlohmann::json(evaluation).dump(1).substr(0, 8000)
                << "\n";
      throw std::runtime_error("evaluation failed");
    }
    return std::make_pair(current, evaluation);
  };

  std::printf("edit-to-verdict on %s (%s), timing budget %.2f s of rounds\n", arguments.device.c_str(),
              task.name.c_str(), arguments.timing_seconds);
  std::printf("cold (workers start, precompiled header, baselines measured and cached):\n");
  const auto cold_started = Clock::now();
  verifier->start();
  const double workers_s = std::chrono::duration<double>(Clock::now() - cold_started).count();
  std::printf("  workers    %6.2f s\n", workers_s);
  const auto [cold, cold_evaluation] = evaluate("first");
  std::printf("warm, one-line edits of %s:\n", edited.filename().c_str());
  std::vector<double> warm;
  std::vector<Phases> warm_phases;
  nlohmann::json last_profile;
  for (int edit = 0; edit < arguments.edits; ++edit) {
    edit_one_line(edited, edit + 1);
    const auto [phases, evaluation] = evaluate(("edit " + std::to_string(edit + 1)).c_str());
    warm.push_back(phases.total_s);
    warm_phases.push_back(phases);
    if (evaluation.compile.objects_compiled != 1)
      std::printf("  note: %zu objects recompiled (1 expected)\n", evaluation.compile.objects_compiled);
    last_profile = *evaluation.profile;
    if (edit + 1 == arguments.edits) std::printf("\n%s\n", ca::describe_profile(*evaluation.profile).c_str());
  }

  nlohmann::json naive = nullptr;
  if (arguments.naive) {
    std::printf("naive flow (full cpp_extension rebuild, fresh processes to verify and profile):\n");
    ca::ProcessSpec spec;
    spec.argv = {arguments.python.string(),
                 (fs::path(CUDA_AGENT_SOURCE_DIR) / "benchmarks" / "edit_to_verdict" / "naive_flow.py").string(),
                 "--workspace",
                 workspace.string(),
                 "--device",
                 arguments.device};
    spec.environment = ca::Environment::inherit_all();
    spec.timeout = std::chrono::minutes(10);
    const ca::ProcessResult result = ca::run_process(spec);
    if (!result.succeeded()) {
      std::cerr << "the naive flow failed (" << ca::describe_exit(result) << "):\n"
                << result.standard_output.text << result.standard_error.text << "\n";
      return 1;
    }
    const std::string text = result.standard_output.text;
    naive = nlohmann::json::parse(text.substr(text.rfind('{')));
    std::printf("  rebuild %.2f s, verify %.2f s, profile %.2f s: %.2f s\n", naive["rebuild_s"].get<double>(),
                naive["verify_s"].get<double>(), naive["profile_s"].get<double>(), naive["total_s"].get<double>());
  }

  const double fast = median(warm);
  const double slowest = *std::max_element(warm.begin(), warm.end());
  const double ratio = naive.is_null() ? 0 : naive["total_s"].get<double>() / fast;
  std::printf("\n%-34s %10s\n", "", "seconds");
  std::printf("%-34s %10.2f\n", "warm edit-to-verdict, median", fast);
  std::printf("%-34s %10.2f\n", "warm edit-to-verdict, slowest", slowest);
  if (!naive.is_null()) {
    std::printf("%-34s %10.2f\n", "naive flow", naive["total_s"].get<double>());
    std::printf("%-34s %9.1fx\n", "speedup", ratio);
  }
  std::vector<std::string> failures;
  if (fast > 4.0) failures.push_back("median warm edit-to-verdict " + std::to_string(fast) + " s > 4 s");
  if (!naive.is_null() && ratio < 10)
    failures.push_back("only " + std::to_string(ratio) + "x faster than the naive flow");
  for (const std::string& failure : failures) std::printf("FAIL: %s\n", failure.c_str());

  if (!arguments.out.empty()) {
    nlohmann::json phases = nlohmann::json::array();
    for (const Phases& each : warm_phases) phases.push_back({{"total_s", each.total_s}, {"phases_s", each.seconds}});
    const nlohmann::json report = {{"benchmark", "edit_to_verdict"},
                                   {"device", arguments.device},
                                   {"timing_seconds", arguments.timing_seconds},
                                   {"workers_start_s", workers_s},
                                   {"cold_s", cold.total_s},
                                   {"cold_phases_s", cold.seconds},
                                   {"warm", phases},
                                   {"warm_median_s", fast},
                                   {"warm_slowest_s", slowest},
                                   {"naive", naive},
                                   {"speedup", ratio},
                                   {"last_profile", last_profile},
                                   {"failures", failures}};
    fs::create_directories(fs::absolute(arguments.out).parent_path());
    std::ofstream(arguments.out) << report.dump(1) << "\n";
    std::printf("results written to %s\n", arguments.out.c_str());
  }
  return failures.empty() ? 0 : 1;
} catch (const std::exception& error) {
  std::cerr << "edit_to_verdict: " << error.what() << "\n";
  return 2;
}
