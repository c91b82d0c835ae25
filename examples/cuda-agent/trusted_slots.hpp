// SPDX-License-Identifier: Apache-2.0
#pragma once

// The trusted evaluators of `cuda-agent serve` and `cuda-agent worker`: one per slot of a
// pool (and one for its build workers), each with its own warm harness workers, built the
// same way on a coordinator and on its remote workers so that both give the same verdicts.

#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/process.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/sandbox/visible_gpus.hpp>
#include <cuda_agent/service/evaluation_pool.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>
#include <cuda_agent/version.hpp>

#include <algorithm>   // max, sort, find_if
#include <atomic>      // atomic
#include <chrono>      // seconds
#include <cstdint>     // uint64_t
#include <cstdlib>     // getenv, atoi
#include <filesystem>  // path
#include <fstream>     // ifstream
#include <memory>      // make_shared
#include <optional>    // optional
#include <sstream>     // istringstream
#include <string>      // string, stoi
#include <thread>      // hardware_concurrency
#include <vector>      // vector

#include <pthread.h>       // pthread_sigmask
#include <signal.h>        // sigset_t, SIGTERM, SIGINT
#include <sys/resource.h>  // getrlimit, setrlimit
#include <unistd.h>        // geteuid

#include "command_line.hpp"

namespace cuda_agent::cli {

/// What a slot's trusted evaluator is made with.
struct TrustedSlotSettings {
  bool no_profile = false;
  double timing_seconds = 2.0;
  bool strict = false;
  std::filesystem::path python;
  std::filesystem::path cache_directory;
  bool unconfined = false;
};

/// The device minors of `--gpus A,B,...` (a usage error names `option`).
inline std::vector<int> parse_gpus(const std::string& list, const std::string& option = "--gpus") {
  std::vector<int> devices;
  std::istringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    try {
      std::size_t used = 0;
      devices.push_back(std::stoi(item, &used));
      if (used != item.size() || devices.back() < 0) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UsageError(option + ": expects device minors A,B,..., not '" + list + "'");
    }
  }
  if (devices.empty()) throw UsageError(option + ": name at least one GPU");
  return devices;
}

/// The device minors of the GPUs in CUDA_VISIBLE_DEVICES, which engines such as Ray and
/// Slurm set to the GPUs they reserved for a job (`--gpus visible`).
inline std::vector<int> visible_gpu_minors() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr || *visible == '\0')
    throw UsageError("--gpus visible: CUDA_VISIBLE_DEVICES is not set (no GPU was reserved for this process)");
  try {
    return visible_gpu_minors(visible, driver_gpus());
  } catch (const std::invalid_argument& error) {
    throw UsageError(std::string("--gpus visible (CUDA_VISIBLE_DEVICES=") + visible + "): " + error.what());
  }
}

/// Every client connection and every harness worker holds descriptors: the soft limit
/// (often 1,024) would refuse connections long before the threads run out.
inline void raise_descriptor_limit() {
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
}

/// The first line a program prints (empty where it cannot run, fails or prints nothing).
inline std::string first_line_of(std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.environment = Environment::inherit_all();
  spec.timeout = std::chrono::seconds(60);
  try {
    const ProcessResult result = run_process(spec);
    if (!result.succeeded()) return {};
    const std::string& text = result.standard_output.text;
    return text.substr(0, text.find('\n'));
  } catch (const std::exception&) {
    return {};
  }
}

/// What nvidia-smi says of GPU `index`: `fields` (its --query-gpu names) as one CSV line
/// without units (empty when it cannot say).
inline std::string nvidia_smi_query(const std::string& fields, int index) {
  return first_line_of(
      {"nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader,nounits", "-i", std::to_string(index)});
}

/// The memory of GPU `index` in bytes, as nvidia-smi reports it (0 when it cannot say).
inline std::uint64_t gpu_memory_bytes(int index) {
  try {
    return static_cast<std::uint64_t>(std::stoull(nvidia_smi_query("memory.total", index))) << 20U;  // MiB
  } catch (const std::exception&) {
    return 0;
  }
}

/// The trusted evaluator of one slot (or of the build workers): its own warm workers.
inline AnyStagedEvaluator make_evaluator(const TrustedSlotSettings& options, const PoolSlot& slot,
                                         const std::filesystem::path& work) {
  detail::make_open_directory(work);
  HarnessOptions harness;
  harness.device = slot.device;
  harness.python = options.python;
  harness.work_directory = work / "harness";
  harness.gpus = {slot.index};
  if (options.unconfined)
    harness.sandbox_factory = [](SandboxOptions sandbox) { return AnySandbox(ProcessSandbox(std::move(sandbox))); };
  VerificationPolicy policy;
  if (options.strict) policy.tolerance = TolerancePolicy::strict();
  TrustedEvaluatorOptions evaluator_options;
  evaluator_options.work_directory = work / "evaluations";
  detail::make_open_directory(evaluator_options.work_directory);

  CompileOptions compile;
  compile.device = slot.device;
  compile.python = options.python;
  compile.cache_directory = options.cache_directory;
  compile.gpu_index = slot.index;
  SandboxOptions build_sandbox;
  build_sandbox.workspace = evaluator_options.work_directory;
  if (slot.device == "cuda") build_sandbox.gpus = {slot.index};
  build_sandbox.mounts.push_back(precompiled_header_mount(
      compile.cache_directory.empty() ? default_compile_cache_directory() : compile.cache_directory));
  if (::geteuid() == 0) compile.sandbox_user = sandbox_identity(build_sandbox);
  AnySandbox sandbox =
      options.unconfined ? AnySandbox(ProcessSandbox(build_sandbox)) : make_default_sandbox(build_sandbox);
  auto compiler = std::make_shared<CompileDriver<AnySandbox>>(std::move(sandbox), compile);

  auto verifier = std::make_shared<HarnessVerifier>(std::move(harness), policy);
  std::optional<AnyProfiler> profiler;
  if (!options.no_profile) {
    HarnessProfilerOptions timing;
    timing.device = slot.device;
    timing.device_index = slot.index;
    timing.budget.seconds = options.timing_seconds;
    timing.baseline_cache_directory = work / "baselines";
    timing.extra_allowed_operations = policy.extra_allowed_operations;
    profiler.emplace(HarnessProfiler(std::move(timing), WorkerTimingLauncher(verifier)));
  }
  return AnyStagedEvaluator(TrustedEvaluator<SharedVerifier<HarnessVerifier>, AnySandbox>(
      std::move(compiler), SharedVerifier<HarnessVerifier>(verifier), std::move(profiler),
      std::move(evaluator_options)));
}

/// Makes each slot's evaluator, in a work folder of its own under `work`.
inline EvaluationPool::SlotEvaluatorFactory slot_evaluators(const TrustedSlotSettings& settings,
                                                            const std::filesystem::path& work) {
  auto made = std::make_shared<std::atomic<int>>(0);
  return [settings, work, made](const PoolSlot& slot) {
    return make_evaluator(settings, slot, work / ("slot-" + std::to_string((*made)++)));
  };
}

/// Blocks SIGTERM and SIGINT in this thread and the ones it starts after, so that they go to
/// the thread that waits for them (`sigwait` on the set returned), never to a worker.
inline sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

/// The options of a machine's own pool, which `serve` and `worker` share.
struct LocalSlotOptions {
  std::string device;  // empty: cuda where an NVIDIA GPU is present
  std::string gpus = "0";
  int slots_per_device = 2;
  int build_workers = 0;       // 0: half the cores
  double gpu_memory_gib = -1;  // < 0: 85% of what nvidia-smi reports
  TrustedSlotSettings evaluator;
};

inline void add_local_slot_options(CLI::App& command, LocalSlotOptions& o) {
  command.add_option("--device", o.device, "cpu or cuda (default: cuda when an NVIDIA GPU is present)")
      ->check(one_of({"cpu", "cuda"}))
      ->type_name("cpu|cuda");
  command
      .add_option("--gpus", o.gpus,
                  "the GPUs to use, by device minor (default 0); visible: those of $CUDA_VISIBLE_DEVICES, as Ray "
                  "and Slurm set it")
      ->type_name("A,B,...|visible");
  command.add_option("--slots-per-device", o.slots_per_device, "verification slots that share each device (default 2)")
      ->check(whole_number(1, 64))
      ->type_name("N");
  command.add_option("--build-workers", o.build_workers, "CPU workers that build candidates (default: half the cores)")
      ->check(whole_number(1, 256))
      ->type_name("N");
  command
      .add_option("--gpu-memory-gib", o.gpu_memory_gib,
                  "device memory the verifications of one GPU may hold together (default: 85% of the GPU's; 0: no "
                  "admission by memory)")
      ->check(CLI::Range(0.0, 1.0e6))
      ->type_name("GIB");
  command
      .add_option("--timing-seconds", o.evaluator.timing_seconds, "time for each candidate's timing rounds (default 2)")
      ->check(whole_number(1, 3600))
      ->type_name("S");
  command
      .add_option("--python", o.evaluator.python,
                  "Python with torch for the harness (default $CUDA_AGENT_PYTHON or python3)")
      ->type_name("PATH");
  command.add_option("--cache-dir", o.evaluator.cache_directory, "the compile driver's object cache")->type_name("DIR");
  command.add_flag("--unconfined", o.evaluator.unconfined, "build and run WITHOUT bubblewrap; for trusted code only");
}

/// Settles the defaults (the device, the harness's Python) and returns the devices to use.
inline std::vector<int> settle_local_slots(LocalSlotOptions& options) {
  if (options.device.empty()) options.device = std::filesystem::exists("/dev/nvidia0") ? "cuda" : "cpu";
  options.evaluator.python = python_for_harness(options.evaluator.python);
  if (options.device != "cuda") return {0};
  if (options.gpus != "visible") return parse_gpus(options.gpus);
  const std::vector<int> minors = visible_gpu_minors();
  options.gpus.clear();
  for (const int minor : minors) options.gpus += (options.gpus.empty() ? "" : ",") + std::to_string(minor);
  return minors;
}

/// What the verdicts of a pool on `devices` depend on besides the request: its result
/// cache's environment (`EvaluationPoolOptions::environment`), which a worker also tells its
/// coordinator. This program's version, the harness's Python and its torch, the `policy`
/// evaluated with, and each GPU's model and driver.
inline std::string evaluation_environment(const LocalSlotOptions& options, const std::vector<int>& devices,
                                          const nlohmann::json& policy) {
  const std::string python = options.evaluator.python.string();
  const std::string torch = first_line_of({python, "-c", "import importlib.metadata as m; print(m.version('torch'))"});
  std::string environment = std::string("cuda-agent ") + CUDA_AGENT_VERSION_STRING + " python " + python + " torch " +
                            (torch.empty() ? "unknown" : torch) + " " + policy.dump();
  if (options.device == "cuda")
    for (const int device : devices)
      environment += " gpu " + std::to_string(device) + ": " + nvidia_smi_query("name,driver_version", device);
  return environment;
}

/// The pool's slots on `devices`, its build workers and its device memory budget.
inline void set_local_slots(const LocalSlotOptions& options, const std::vector<int>& devices,
                            EvaluationPoolOptions& pool) {
  pool.slots.clear();
  for (const int device : devices)
    for (int i = 0; i < options.slots_per_device; ++i) pool.slots.push_back(PoolSlot{options.device, device});
  pool.build_workers = options.build_workers > 0 ? static_cast<std::size_t>(options.build_workers)
                                                 : std::max<std::size_t>(1, std::thread::hardware_concurrency() / 2);
  if (options.device == "cuda")  // the rest is the workers' own: their CUDA contexts, torch's caches
    pool.device_memory_bytes =
        options.gpu_memory_gib >= 0
            ? static_cast<std::uint64_t>(options.gpu_memory_gib * static_cast<double>(1ULL << 30U))
            : gpu_memory_bytes(devices.front()) / 100 * 85;
}

}  // namespace cuda_agent::cli
