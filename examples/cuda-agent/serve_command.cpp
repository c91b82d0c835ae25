// SPDX-License-Identifier: Apache-2.0
// `cuda-agent serve`: the evaluation service over HTTP (server/http_service.hpp), with a
// pool of trusted evaluators: builds on CPU workers, verification on slots that share a
// device, timing alone on it.
#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/server/http_service.hpp>
#include <cuda_agent/service/episode_service.hpp>
#include <cuda_agent/service/episode_toolbox.hpp>
#include <cuda_agent/service/evaluation_service.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>
#include <cuda_agent/version.hpp>

#include <algorithm>   // max
#include <chrono>      // seconds
#include <csignal>     // SIGTERM, SIGINT
#include <cstdint>     // uint32_t, uint64_t
#include <cstdio>      // popen, pclose, fgets, FILE
#include <filesystem>  // path
#include <fstream>     // ifstream, ofstream
#include <iostream>    // cout, cerr
#include <memory>      // shared_ptr, make_shared
#include <mutex>       // mutex, lock_guard
#include <optional>    // optional
#include <sstream>     // istringstream
#include <string>      // string
#include <thread>      // thread, hardware_concurrency
#include <vector>      // vector

#include <pthread.h>       // pthread_sigmask
#include <signal.h>        // sigset_t, sigwait
#include <sys/resource.h>  // getrlimit, setrlimit
#include <unistd.h>        // geteuid

#include "command_line.hpp"
#include "commands.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* serve_description =
    R"(Serves trusted evaluations over HTTP/JSON: POST /v1/evaluations (one request or
{"requests": [...]}, ?wait=SECONDS to answer with the results), GET /v1/evaluations/ID,
DELETE /v1/evaluations/ID, GET /v1/evaluations/ID/events (server-sent events),
GET /healthz, GET /metrics. Requests follow resources/service/evaluation_request.schema.json.

Episodes, for agents and RL trainers that run the model themselves: POST /v1/episodes
({"task": ...}; answers with SKILL.md, the workspace's files and the tool specs),
POST /v1/episodes/ID/tools/NAME (the call's arguments; runs in the episode's sandbox),
POST /v1/episodes/ID/finish (the trusted evaluation of its workspace), DELETE to close.
The same as a NeMo-Gym resources server: POST /seed_session, POST /<tool>, POST /verify,
POST /close_session, with the episode in a cookie. Idle episodes close after
--episode-idle-s.

Builds run on CPU workers; each device has verification slots that share it and one
timing at a time that has it to itself. Every accepted request is journaled in
--state-dir before it is acknowledged: a server started again on the same directory
answers for finished evaluations and runs the unfinished ones. SIGTERM or SIGINT drains:
new requests are refused (503) while accepted ones finish, then the server exits.

Beyond loopback, --tokens is required: a file of lines "TOKEN CLIENT [MAX_IN_FLIGHT [QUOTA]]"
(tokens of 16 characters or more; '#' starts a comment).)";

struct ServeOptions {
  std::string listen = "127.0.0.1:8080";
  std::string device;
  std::string gpus = "0";
  int slots_per_device = 2;
  int build_workers = 0;
  int max_pending = 1024;
  std::filesystem::path state_directory = "cuda-agent-serve";
  std::filesystem::path tokens;
  std::filesystem::path port_file;
  bool allow_host_paths = false;
  bool no_profile = false;
  double timing_seconds = 2.0;
  bool strict = false;
  std::string reward = "milestone";
  std::filesystem::path python;
  std::filesystem::path cache_directory;
  bool unconfined = false;
  bool quiet = false;
  bool no_episodes = false;
  int episode_idle_seconds = 1800;
  int max_episodes = 256;
  double gpu_memory_gib = -1;  // < 0: 85% of what nvidia-smi reports
};

void add_serve_options(CLI::App& command, ServeOptions& o) {
  command.add_option("--listen", o.listen, "HOST:PORT to listen on (default 127.0.0.1:8080; port 0: any free one)")
      ->type_name("HOST:PORT");
  command.add_option("--device", o.device, "cpu or cuda (default: cuda when an NVIDIA GPU is present)")
      ->check(one_of({"cpu", "cuda"}))
      ->type_name("cpu|cuda");
  command.add_option("--gpus", o.gpus, "the GPUs to use, by device minor (default 0)")->type_name("A,B,...");
  command.add_option("--slots-per-device", o.slots_per_device, "verification slots that share each device (default 2)")
      ->check(whole_number(1, 64))
      ->type_name("N");
  command.add_option("--build-workers", o.build_workers, "CPU workers that build candidates (default: half the cores)")
      ->check(whole_number(1, 256))
      ->type_name("N");
  command.add_option("--max-pending", o.max_pending, "unfinished evaluations held at most (default 1024)")
      ->check(whole_number(1, 1000000))
      ->type_name("N");
  command
      .add_option("--state-dir", o.state_directory,
                  "the journal and unfinished candidates (default ./cuda-agent-serve)")
      ->type_name("DIR");
  command.add_option("--tokens", o.tokens, "bearer tokens and their clients (required beyond loopback)")
      ->type_name("FILE");
  command.add_option("--port-file", o.port_file, "write the port listened on to FILE once listening")
      ->type_name("FILE");
  command.add_flag("--allow-host-paths", o.allow_host_paths,
                   "let requests name task files and candidate directories on this host");
  command.add_flag("--no-profile", o.no_profile, "verify only (rewards are then at most 1)");
  command.add_option("--timing-seconds", o.timing_seconds, "time for each candidate's timing rounds (default 2)")
      ->check(whole_number(1, 3600))
      ->type_name("S");
  command.add_flag("--strict", o.strict, "KernelBench's tolerances instead of the paper's");
  command.add_option("--reward", o.reward, "milestone (default) or speedup")
      ->check(one_of({"milestone", "speedup"}))
      ->type_name("milestone|speedup");
  command.add_option("--python", o.python, "Python with torch for the harness (default $CUDA_AGENT_PYTHON or python3)")
      ->type_name("PATH");
  command.add_option("--cache-dir", o.cache_directory, "the compile driver's object cache")->type_name("DIR");
  command.add_flag("--unconfined", o.unconfined, "build and run WITHOUT bubblewrap; for trusted code only");
  command.add_flag("--quiet", o.quiet, "no line per finished evaluation");
  command.add_flag("--no-episodes", o.no_episodes, "serve evaluations only (no /v1/episodes, no NeMo-Gym routes)");
  command
      .add_option("--episode-idle-s", o.episode_idle_seconds,
                  "close an episode after this many seconds without a request (default 1800)")
      ->check(whole_number(1, 7 * 24 * 3600))
      ->type_name("S");
  command
      .add_option("--gpu-memory-gib", o.gpu_memory_gib,
                  "device memory the verifications of one GPU may hold together (default: 85% of the GPU's; 0: no "
                  "admission by memory)")
      ->check(CLI::Range(0.0, 1.0e6))
      ->type_name("GIB");
  command.add_option("--max-episodes", o.max_episodes, "open episodes at most (default 256)")
      ->check(whole_number(1, 100000))
      ->type_name("N");
}

/// "TOKEN CLIENT [MAX_IN_FLIGHT [QUOTA]]" lines.
void read_tokens(const std::filesystem::path& path, HttpServiceOptions& http, EvaluationServiceOptions& service) {
  std::ifstream stream(path);
  if (!stream) throw UsageError("--tokens: cannot read " + path.string());
  int number = 0;
  for (std::string line; std::getline(stream, line);) {
    ++number;
    if (const auto comment = line.find('#'); comment != std::string::npos) line.erase(comment);
    std::istringstream fields(line);
    std::string token;
    ServiceClient client;
    if (!(fields >> token)) continue;
    if (!(fields >> client.name))
      throw UsageError("--tokens: " + path.string() + ":" + std::to_string(number) + ": expected TOKEN CLIENT");
    if (long long limit = 0; fields >> limit) client.max_in_flight = static_cast<std::size_t>(std::max(1LL, limit));
    if (long long quota = 0; fields >> quota) client.quota = static_cast<std::size_t>(std::max(0LL, quota));
    http.tokens[token] = client.name;
    service.clients[client.name] = client;
  }
  if (http.tokens.empty()) throw UsageError("--tokens: " + path.string() + " holds no token");
}

/// The memory of GPU `index` in bytes, as nvidia-smi reports it (0 when it cannot say).
std::uint64_t gpu_memory_bytes(int index) {
  const std::string command =
      "nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i " + std::to_string(index) + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return 0;
  char line[64] = {};
  const bool read = std::fgets(line, sizeof(line), pipe) != nullptr;
  ::pclose(pipe);
  if (!read) return 0;
  try {
    return static_cast<std::uint64_t>(std::stoull(line)) << 20U;  // MiB
  } catch (const std::exception&) {
    return 0;
  }
}

/// The trusted evaluator of one slot (or of the build workers): its own warm workers.
AnyStagedEvaluator make_evaluator(const ServeOptions& options, const PoolSlot& slot,
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

int run_serve(ServeOptions& options) {
  const auto colon = options.listen.rfind(':');
  if (colon == std::string::npos) throw UsageError("--listen: expects HOST:PORT, not '" + options.listen + "'");
  HttpServiceOptions http;
  http.host = options.listen.substr(0, colon);
  try {
    http.port = std::stoi(options.listen.substr(colon + 1));
  } catch (const std::exception&) {
    throw UsageError("--listen: the port of '" + options.listen + "' is no number");
  }
  if (http.port < 0 || http.port > 65535) throw UsageError("--listen: no port " + std::to_string(http.port));
  if (http.host.size() > 2 && http.host.front() == '[' && http.host.back() == ']')
    http.host = http.host.substr(1, http.host.size() - 2);

  EvaluationServiceOptions service;
  if (!options.tokens.empty()) read_tokens(options.tokens, http, service);
  if (!is_loopback_host(http.host) && http.tokens.empty())
    throw UsageError("--listen " + options.listen + " is beyond loopback: give --tokens FILE");
  if (options.device.empty()) options.device = std::filesystem::exists("/dev/nvidia0") ? "cuda" : "cpu";
  options.python = python_for_harness(options.python);
  std::vector<int> devices{0};
  if (options.device == "cuda") {
    devices.clear();
    std::istringstream list(options.gpus);
    for (std::string item; std::getline(list, item, ',');) {
      try {
        devices.push_back(std::stoi(item));
      } catch (const std::exception&) {
        throw UsageError("--gpus: expects device minors A,B,..., not '" + options.gpus + "'");
      }
    }
    if (devices.empty()) throw UsageError("--gpus: name at least one GPU");
  }
  service.pool.slots.clear();
  for (const int device : devices)
    for (int i = 0; i < options.slots_per_device; ++i) service.pool.slots.push_back(PoolSlot{options.device, device});
  service.pool.build_workers = options.build_workers > 0
                                   ? static_cast<std::size_t>(options.build_workers)
                                   : std::max<std::size_t>(1, std::thread::hardware_concurrency() / 2);
  service.pool.max_pending = static_cast<std::size_t>(options.max_pending);
  if (options.device == "cuda") {
    // The rest is the workers' own: their CUDA contexts, torch's caches.
    service.pool.device_memory_bytes =
        options.gpu_memory_gib >= 0
            ? static_cast<std::uint64_t>(options.gpu_memory_gib * static_cast<double>(1ULL << 30U))
            : gpu_memory_bytes(devices.front()) / 100 * 85;
  }
  service.state_directory = std::filesystem::absolute(options.state_directory);
  service.allow_host_paths = options.allow_host_paths;
  service.policy = {{"tolerance", options.strict ? "strict" : "default"},
                    {"timing", !options.no_profile},
                    {"reward", options.reward},
                    {"device", options.device}};
  // A fix to the evaluator must not be answered from results the old one cached.
  service.pool.environment = std::string("cuda-agent ") + CUDA_AGENT_VERSION_STRING + " python " +
                             options.python.string() + " " + service.policy.dump();
  if (options.reward == "speedup")
    service.reward = [](const Evaluation& evaluation) { return SpeedupReward{}.reward(evaluation); };
  const std::filesystem::path work = service.state_directory / "work";
  service.pool.work_directory = work / "pool";
  if (!options.quiet)
    service.pool.on_event = [](const PoolEvent& event) {
      if (event.stage != PoolStage::finished || !event.result) return;
      std::cerr << "cuda-agent serve: " << event.id << " " << to_string(event.result->outcome)
                << (event.result->cached ? " (cached)" : "")
                << (event.result->message.empty() ? "" : ": " + event.result->message.substr(0, 200)) << std::endl;
    };

  // Every client connection and every harness worker holds descriptors: the soft limit
  // (often 1,024) would refuse connections long before the threads run out.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }

  // Signals go to the thread that waits for them, never to a worker or a server thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::mutex made_mutex;
  int made = 0;
  const ServeOptions& settings = options;
  EvaluationService evaluations(service,
                                make_evaluator(settings, PoolSlot{options.device, devices.front()}, work / "builder"),
                                [&settings, &work, &made, &made_mutex](const PoolSlot& slot) {
                                  int number = 0;
                                  {
                                    const std::lock_guard lock(made_mutex);
                                    number = made++;
                                  }
                                  return make_evaluator(settings, slot, work / ("slot-" + std::to_string(number)));
                                });
  std::optional<EpisodeService> episodes;
  if (!options.no_episodes) {
    StandardEpisodeToolboxOptions tools;
    tools.work_directory = work / "episode-tools";
    tools.device = options.device;
    tools.gpu = devices.front();
    tools.python = options.python;
    tools.compile_cache_directory = options.cache_directory;
    if (options.strict) tools.verification.tolerance = TolerancePolicy::strict();
    tools.timing = !options.no_profile;
    tools.timing_seconds = options.timing_seconds;
    if (options.unconfined)
      tools.make_sandbox = [](SandboxOptions sandbox) { return AnySandbox(ProcessSandbox(std::move(sandbox))); };
    EpisodeServiceOptions episode_options;
    episode_options.state_directory = service.state_directory / "episodes";
    episode_options.workspace.device = options.device;
    episode_options.idle_expiry = std::chrono::seconds(options.episode_idle_seconds);
    episode_options.max_episodes = static_cast<std::size_t>(options.max_episodes);
    episode_options.allow_host_paths = options.allow_host_paths;
    episodes.emplace(std::move(episode_options), evaluations, standard_episode_toolbox(std::move(tools)));
  }
  HttpService server(evaluations, http, episodes ? &*episodes : nullptr);
  const int port = server.bind();
  std::thread listener([&server] { server.run(); });
  if (!options.port_file.empty()) {
    const std::filesystem::path partial = options.port_file.string() + ".partial";
    std::ofstream(partial) << port << "\n";
    std::filesystem::rename(partial, options.port_file);
  }
  std::cout << "cuda-agent serve: listening on http://" << http.host << ":" << port << " (" << service.pool.slots.size()
            << " " << options.device << " slots, " << service.pool.build_workers << " build workers, state in "
            << service.state_directory.string() << ", " << evaluations.health()["recovered"].get<std::size_t>()
            << " recovered" << (episodes ? ", " + std::to_string(episodes->size()) + " episodes reopened" : "") << ")"
            << std::endl;

  int received = 0;
  sigwait(&stop_signals, &received);
  std::cout << "cuda-agent serve: " << (received == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": draining (new requests are refused; accepted ones finish)" << std::endl;
  evaluations.drain();
  server.stop();
  listener.join();
  std::cout << "cuda-agent serve: drained, exiting" << std::endl;
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& program, int& exit_status) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* command =
      program.add_subcommand("serve", "serve trusted evaluations over HTTP/JSON to trainers and agents");
  command->footer(std::string(serve_description) +
                  "\n\nexit status: 0 drained after a signal, 2 usage error, 3 failed");
  add_serve_options(*command, *options);
  command->callback([options, &exit_status] { exit_status = run_serve(*options); });
}

}  // namespace cuda_agent::cli
