// SPDX-License-Identifier: Apache-2.0
// Time of one verification (5 input sets x 2 runs, reference and candidate in their
// sandboxed processes, every check) three ways:
//   warm   the harness workers are running: each verification forks two children;
//   cold   a new verifier each time: the workers start (import torch) first;
//   floor  a fresh `python3 -c "import torch"`, what any fresh-process verification pays
//          before it does anything.
//
//   cuda_agent_benchmark_verify_latency [--device cpu|cuda] [--repeats N] [--cold N]
//                                       [--task FILE --candidate DIR] [--json FILE]
//
// Without --task/--candidate it verifies the adversarial suite's correct ReLU candidate
// (tests/adversarial) on the chosen device.
#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>

#include <algorithm>   // max, sort
#include <chrono>      // steady_clock
#include <cstdlib>     // atoi, exit
#include <filesystem>  // path, exists, copy_file
#include <fstream>     // ifstream, ofstream
#include <iostream>    // cout, cerr
#include <string>      // string
#include <vector>      // vector

#include <unistd.h>  // geteuid, getpid

namespace ca = cuda_agent;
namespace fs = std::filesystem;

namespace {

struct Summary {
  double median = 0, minimum = 0, maximum = 0;
};

Summary summarize(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return {};
  return {values[values.size() / 2], values.front(), values.back()};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = fs::exists("/dev/nvidia0") ? "cuda" : "cpu";
  int repeats = 10;
  int cold = 2;
  fs::path task_file, candidate, json;
  bool prepared_children = true;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << argument << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (argument == "--device")
      device = value();
    else if (argument == "--repeats")
      repeats = std::max(1, std::atoi(value().c_str()));
    else if (argument == "--cold")
      cold = std::max(0, std::atoi(value().c_str()));
    else if (argument == "--task")
      task_file = value();
    else if (argument == "--candidate")
      candidate = value();
    else if (argument == "--json")
      json = value();
    else if (argument == "--no-prepared-children")
      prepared_children = false;
    else {
      std::cerr << "usage: " << argv[0]
                << " [--device cpu|cuda] [--repeats N] [--cold N] [--task FILE --candidate DIR] [--json FILE]"
                   " [--no-prepared-children]\n";
      return 2;
    }
  }
  if (device != "cpu" && device != "cuda") {
    std::cerr << "--device is cuda or cpu, not '" << device << "'\n";
    return 2;
  }
  if (device == "cuda" && !(fs::exists("/dev/nvidia0") && fs::exists("/proc/driver/nvidia/version"))) {
    std::cout << "verification latency on cuda: skipped, no NVIDIA GPU here (no /dev/nvidia0 or driver);"
                 " run with --device cpu to measure the CPU path\n";
    return 0;
  }
  const fs::path suite = fs::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "adversarial";
  const fs::path work = fs::temp_directory_path() / ("cuda-agent-verify-latency-" + std::to_string(::getpid()));
  ca::detail::make_open_directory(work);
  if (task_file.empty()) task_file = suite / "tasks" / device / "relu.py";
  if (candidate.empty()) {
    candidate = work / "candidate";
    fs::create_directories(candidate / "kernels");
    fs::copy_file(suite / "candidates" / "correct_relu" / "model_new.py", candidate / "model_new.py");
    for (const auto& entry : fs::directory_iterator(suite / "kernels" / device))
      fs::copy_file(entry.path(), candidate / "kernels" / entry.path().filename());
  }
  const ca::Task task = ca::load_kernelbench_task(task_file);

  // Build once (the object cache makes later builds of the same sources free).
  ca::SandboxOptions build_sandbox;
  build_sandbox.workspace = work;
  if (device == "cuda") build_sandbox.gpus = {0};
  ca::CompileOptions compile;
  compile.device = device;
  compile.python = CUDA_AGENT_PYTHON;
  if (::geteuid() == 0) compile.sandbox_user = ca::sandbox_identity(build_sandbox);
  ca::CompileDriver<ca::AnySandbox> driver(ca::make_default_sandbox(build_sandbox), compile);
  ca::detail::make_open_directory(work / "build");
  const ca::CompileResult built = driver.build(candidate, work / "build");
  if (!built.succeeded) {
    std::cerr << "the candidate did not build:\n" << built.log << "\n";
    return 1;
  }
  const ca::Candidate target{candidate, work / "build"};

  ca::HarnessOptions options;
  options.device = device;
  options.python = CUDA_AGENT_PYTHON;
  options.prepared_children = prepared_children;

  // Cold: a new verifier (new workers) each time.
  std::vector<double> cold_seconds;
  for (int i = 0; i < cold; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ca::HarnessVerifier verifier(options);
    const ca::VerificationResult result = verifier.verify(task, target);
    cold_seconds.push_back(seconds_since(start));
    if (!result.correct) {
      std::cerr << "the candidate was rejected: " << (result.rejection ? result.rejection->message : "") << "\n";
      return 1;
    }
  }

  // Warm: one verifier, started before the clock runs.
  ca::HarnessVerifier verifier(options);
  const auto start_workers = std::chrono::steady_clock::now();
  verifier.start();
  const double startup = seconds_since(start_workers);
  std::vector<double> warm_seconds;
  nlohmann::json last;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const ca::VerificationResult result = verifier.verify(task, target);
    warm_seconds.push_back(seconds_since(start));
    if (!result.correct) {
      std::cerr << "the candidate was rejected: " << (result.rejection ? result.rejection->message : "") << "\n";
      return 1;
    }
    last = result.details;
  }

  // Floor: a fresh interpreter importing torch.
  std::vector<double> floor_seconds;
  for (int i = 0; i < std::max(1, cold); ++i) {
    ca::ProcessSpec spec;
    spec.argv = {CUDA_AGENT_PYTHON, "-c", device == "cuda" ? "import torch; torch.cuda.init()" : "import torch"};
    const auto start = std::chrono::steady_clock::now();
    (void)ca::run_process(spec);
    floor_seconds.push_back(seconds_since(start));
  }

  const Summary warm = summarize(warm_seconds), cold_summary = summarize(cold_seconds),
                floor = summarize(floor_seconds);
  std::cout << "verification of " << task.name << " on " << device
            << (last.contains("device_name") ? " (" + last["device_name"].get<std::string>() + ")" : std::string())
            << ", 5 input sets x 2 runs\n"
            << "  warm workers:   median " << warm.median << " s (min " << warm.minimum << ", max " << warm.maximum
            << ") over " << warm_seconds.size() << " verifications\n"
            << "  worker startup: " << startup << " s (both workers, in parallel sandboxes)\n";
  if (!cold_seconds.empty())
    std::cout << "  cold (new workers each time): median " << cold_summary.median << " s over " << cold_seconds.size()
              << "\n";
  std::cout << "  floor of any fresh process (python3 -c 'import torch"
            << (device == "cuda" ? "; torch.cuda.init()" : "") << "'): median " << floor.median << " s\n";
  if (last.contains("reference_timings_ms"))
    std::cout << "  last reference timings (ms): " << last["reference_timings_ms"].dump() << "\n";
  if (last.contains("candidate_timings_ms"))
    std::cout << "  last candidate timings (ms): " << last["candidate_timings_ms"].dump() << "\n";
  if (last.contains("host_timings_ms"))
    std::cout << "  last host timings (ms): " << last["host_timings_ms"].dump() << "\n";
  if (last.contains("worker_startup"))
    std::cout << "  worker startup breakdown (s): " << last["worker_startup"].dump() << "\n";
  if (!json.empty()) {
    std::ofstream(json) << nlohmann::json{{"task", task.name},
                                          {"device", device},
                                          {"warm_seconds", warm_seconds},
                                          {"cold_seconds", cold_seconds},
                                          {"floor_seconds", floor_seconds},
                                          {"worker_startup_seconds", startup},
                                          {"last_details", last}}
                               .dump(2)
                        << "\n";
  }
  std::error_code ignored;
  fs::remove_all(work, ignored);
  return 0;
}
