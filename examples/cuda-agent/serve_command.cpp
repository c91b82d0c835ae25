// SPDX-License-Identifier: Apache-2.0
// `cuda-agent serve`: the evaluation service over HTTP (server/http_service.hpp), with a
// pool of trusted evaluators: builds on CPU workers, verification on slots that share a
// device, timing alone on it.
#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/detail/shell_command.hpp>
#include <cuda_agent/evaluate/reward_policies.hpp>
#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/server/http_service.hpp>
#include <cuda_agent/server/ray_job_launcher.hpp>
#include <cuda_agent/service/episode_service.hpp>
#include <cuda_agent/service/episode_toolbox.hpp>
#include <cuda_agent/service/evaluation_service.hpp>
#include <cuda_agent/service/slurm_job_launcher.hpp>
#include <cuda_agent/service/worker_launcher.hpp>
#include <cuda_agent/verify/harness_verifier.hpp>

#include <algorithm>   // max
#include <chrono>      // seconds
#include <csignal>     // SIGTERM, SIGINT
#include <cstdint>     // uint32_t, uint64_t
#include <cstdio>      // popen, pclose, fgets, FILE
#include <filesystem>  // path
#include <fstream>     // ifstream, ofstream
#include <iostream>    // cout, cerr
#include <map>         // map
#include <memory>      // shared_ptr, make_shared
#include <mutex>       // mutex, lock_guard
#include <optional>    // optional
#include <sstream>     // istringstream
#include <string>      // string
#include <thread>      // thread
#include <utility>     // pair, move
#include <vector>      // vector

#include <pthread.h>       // pthread_sigmask
#include <signal.h>        // sigset_t, sigwait
#include <sys/resource.h>  // getrlimit, setrlimit
#include <unistd.h>        // geteuid

#include "command_line.hpp"
#include "commands.hpp"
#include "trusted_slots.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* serve_description =
    R"(Serves trusted evaluations over HTTP/JSON: POST /v1/evaluations (one request or
{"requests": [...]}, ?wait=SECONDS to answer with the results), GET /v1/evaluations/ID,
DELETE /v1/evaluations/ID, GET /v1/evaluations/ID/events (server-sent events),
GET /healthz, GET /metrics. Requests follow resources/service/evaluation_request.schema.json;
a request's "policy" may choose its tolerance profile, timing budget and reward, forbid
libraries, and turn timing off (the server's own, in /healthz, fills in the rest).

Episodes, for agents and RL trainers that run the model themselves: POST /v1/episodes
({"task": ..., "policy": ...}; answers with SKILL.md, the workspace's files and the tool
specs), POST /v1/episodes/ID/tools/NAME (the call's arguments; runs in the episode's sandbox),
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
(tokens of 16 characters or more; '#' starts a comment).

With --accept-workers, `cuda-agent worker` processes on other machines register and take
whole requests up to their free capacity (POST /v1/workers and below); a worker not heard
from within --worker-timeout-s is lost and what it held goes to others. A worker whose last
--quarantine-after results were infrastructure errors (a broken GPU) is quarantined: it gets
no more requests, what it held goes to others, /healthz and /metrics show it. A request a
worker fails that way goes to another, on at most 3 workers. Results are cached under the
environment of the worker that evaluated them (GPU, driver, torch, cuda-agent), and answer
only while a worker of that environment is registered. --workers-only evaluates nothing
here. A worker's results are trusted as verdicts: with --tokens, or beyond loopback,
workers need tokens of their own (--worker-tokens: lines "TOKEN WORKER_NAME").

With --ray-address (a Ray cluster's dashboard, its Jobs API) or --slurm (sbatch, squeue and
scancel of this host), the coordinator starts --worker-jobs `cuda-agent worker` processes as
jobs of that engine, each reserving --gpus-per-worker GPUs and --cpus-per-worker CPUs, and
keeps them: a job that ends, or whose worker is quarantined, is replaced after a back-off
(at most --max-restarts within 10 minutes). Slurm starts them as one job array. They get a
token made at start, in the job's environment, and --worker-arguments, split into words as
a POSIX shell splits them (quotes and backslashes keep spaces in a word; nothing is
expanded). SIGTERM or SIGINT drains, then stops the jobs.)";

/// Worker processes as jobs of a cluster's engine: Ray (its dashboard's address) or Slurm.
struct LaunchedWorkerOptions {
  std::string ray_address;
  bool slurm = false;
  std::string slurm_partition;
  std::vector<std::string> slurm_options;
  std::filesystem::path slurm_log_directory;
  int workers = 1;
  double gpus_per_worker = 1;
  double cpus_per_worker = 1;
  std::string coordinator_url;
  std::filesystem::path worker_program;
  std::string worker_arguments;
  int max_restarts = 10;
};

struct ServeOptions {
  std::string listen = "127.0.0.1:8080";
  LocalSlotOptions local;
  int max_pending = 1024;
  std::filesystem::path state_directory = "cuda-agent-serve";
  std::filesystem::path tokens;
  std::filesystem::path port_file;
  bool allow_host_paths = false;
  std::string reward = "milestone";
  bool quiet = false;
  bool no_episodes = false;
  int episode_idle_seconds = 1800;
  int max_episodes = 256;
  bool accept_workers = false;
  bool workers_only = false;
  std::filesystem::path worker_tokens;
  int worker_timeout_seconds = 30;
  int quarantine_after = 3;
  LaunchedWorkerOptions launched;
};

void add_serve_options(CLI::App& command, ServeOptions& o) {
  command.add_option("--listen", o.listen, "HOST:PORT to listen on (default 127.0.0.1:8080; port 0: any free one)")
      ->type_name("HOST:PORT");
  add_local_slot_options(command, o.local);
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
  command.add_flag("--no-profile", o.local.evaluator.no_profile, "verify only (rewards are then at most 1)");
  command.add_flag("--strict", o.local.evaluator.strict, "KernelBench's tolerances instead of the paper's");
  command.add_option("--reward", o.reward, "milestone (default) or speedup")
      ->check(one_of({"milestone", "speedup"}))
      ->type_name("milestone|speedup");
  command.add_flag("--quiet", o.quiet, "no line per finished evaluation");
  command.add_flag("--no-episodes", o.no_episodes, "serve evaluations only (no /v1/episodes, no NeMo-Gym routes)");
  command
      .add_option("--episode-idle-s", o.episode_idle_seconds,
                  "close an episode after this many seconds without a request (default 1800)")
      ->check(whole_number(1, 7 * 24 * 3600))
      ->type_name("S");
  command.add_flag("--accept-workers", o.accept_workers, "let `cuda-agent worker` processes take requests");
  command.add_flag("--workers-only", o.workers_only,
                   "no slots here: remote workers evaluate everything (implies --accept-workers)");
  command.add_option("--worker-tokens", o.worker_tokens, "the workers' bearer tokens: lines \"TOKEN WORKER_NAME\"")
      ->type_name("FILE");
  command
      .add_option("--worker-timeout-s", o.worker_timeout_seconds,
                  "a worker not heard from for this long is lost (default 30)")
      ->check(whole_number(1, 3600))
      ->type_name("S");
  command
      .add_option("--quarantine-after", o.quarantine_after,
                  "quarantine a worker after this many infrastructure errors in a row (default 3; 0: never)")
      ->check(whole_number(0, 1000000))
      ->type_name("N");
  command
      .add_option("--ray-address", o.launched.ray_address,
                  "start the workers as jobs of the Ray cluster whose dashboard is at URL (implies --accept-workers)")
      ->type_name("URL");
  command.add_flag("--slurm", o.launched.slurm,
                   "start the workers as one Slurm job array, with this host's sbatch (implies --accept-workers)");
  command
      .add_option("--slurm-partition", o.launched.slurm_partition,
                  "the partition of the Slurm jobs (default: the cluster's)")
      ->type_name("NAME");
  command
      .add_option("--slurm-option", o.launched.slurm_options,
                  "an sbatch option for the Slurm jobs, repeatable (e.g. --slurm-option=--time=12:00:00)")
      ->type_name("OPTION");
  command
      .add_option("--slurm-log-dir", o.launched.slurm_log_directory,
                  "where each Slurm job writes its output, on the node that runs it (default: nowhere)")
      ->type_name("DIR");
  command.add_option("--worker-jobs", o.launched.workers, "worker jobs to keep on Ray or Slurm (default 1)")
      ->check(whole_number(1, 4096))
      ->type_name("N");
  command.add_option("--gpus-per-worker", o.launched.gpus_per_worker, "GPUs each worker job reserves (default 1)")
      ->check(CLI::Range(0.0, 1024.0))
      ->type_name("G");
  command.add_option("--cpus-per-worker", o.launched.cpus_per_worker, "CPUs each worker job reserves (default 1)")
      ->check(CLI::Range(0.0, 4096.0))
      ->type_name("C");
  command
      .add_option("--coordinator-url", o.launched.coordinator_url,
                  "this coordinator's address as the worker jobs reach it (default: http://HOST:PORT of --listen)")
      ->type_name("URL");
  command
      .add_option("--worker-program", o.launched.worker_program,
                  "the cuda-agent program on the nodes of the worker jobs (default: this one's path)")
      ->type_name("PATH");
  command
      .add_option("--worker-arguments", o.launched.worker_arguments,
                  "more arguments for each `cuda-agent worker` job, split into words as a shell does, quotes and "
                  "backslashes keeping spaces (e.g. \"--slots-per-device 2 --cache-dir '/scratch/cuda agent'\")")
      ->type_name("ARGS");
  command
      .add_option("--max-restarts", o.launched.max_restarts,
                  "ended worker jobs replaced within 10 minutes at most, then no more (default 10)")
      ->check(whole_number(0, 100000))
      ->type_name("N");
  command.add_option("--max-episodes", o.max_episodes, "open episodes at most (default 256)")
      ->check(whole_number(1, 100000))
      ->type_name("N");
}

/// The fields of each line of a token file, by line number ('#' starts a comment; blank
/// lines are skipped). A usage error names `option` when it cannot be read or holds none.
std::vector<std::pair<int, std::vector<std::string>>> token_file_lines(const std::filesystem::path& path,
                                                                       const std::string& option) {
  std::ifstream stream(path);
  if (!stream) throw UsageError(option + ": cannot read " + path.string());
  std::vector<std::pair<int, std::vector<std::string>>> lines;
  int number = 0;
  for (std::string line; std::getline(stream, line);) {
    ++number;
    if (const auto comment = line.find('#'); comment != std::string::npos) line.erase(comment);
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string field; words >> field;) fields.push_back(field);
    if (!fields.empty()) lines.emplace_back(number, std::move(fields));
  }
  if (lines.empty()) throw UsageError(option + ": " + path.string() + " holds no token");
  return lines;
}

/// "TOKEN CLIENT [MAX_IN_FLIGHT [QUOTA]]" lines.
void read_tokens(const std::filesystem::path& path, HttpServiceOptions& http, EvaluationServiceOptions& service) {
  for (const auto& [number, fields] : token_file_lines(path, "--tokens")) {
    if (fields.size() < 2)
      throw UsageError("--tokens: " + path.string() + ":" + std::to_string(number) + ": expected TOKEN CLIENT");
    ServiceClient client;
    client.name = fields[1];
    try {
      if (fields.size() > 2) client.max_in_flight = static_cast<std::size_t>(std::max(1LL, std::stoll(fields[2])));
      if (fields.size() > 3) client.quota = static_cast<std::size_t>(std::max(0LL, std::stoll(fields[3])));
    } catch (const std::exception&) {
      throw UsageError("--tokens: " + path.string() + ":" + std::to_string(number) +
                       ": MAX_IN_FLIGHT and QUOTA are whole numbers");
    }
    http.tokens[fields[0]] = client.name;
    service.clients[client.name] = client;
  }
}

/// "TOKEN WORKER_NAME" lines.
std::map<std::string, std::string> read_worker_tokens(const std::filesystem::path& path) {
  std::map<std::string, std::string> tokens;
  for (const auto& [number, fields] : token_file_lines(path, "--worker-tokens")) {
    if (fields[0].size() < 16)
      throw UsageError("--worker-tokens: " + path.string() + ":" + std::to_string(number) +
                       ": a token of 16 characters or more");
    tokens[fields[0]] = fields.size() > 1 ? fields[1] : "worker";
  }
  return tokens;
}

/// The worker jobs that `options` asks for: each runs `cuda-agent worker` for the
/// coordinator at `*coordinator_url` (read when a job is submitted, after listening), with
/// `token` in its environment.
WorkerFleetOptions launched_fleet_options(const LaunchedWorkerOptions& options, const std::string* coordinator_url,
                                          const std::string& token) {
  WorkerFleetOptions fleet;
  fleet.workers = static_cast<std::size_t>(options.workers);
  fleet.max_restarts = static_cast<std::size_t>(options.max_restarts);
  fleet.restart_window = std::chrono::minutes(10);
  fleet.on_notice = [](const std::string& line) { std::cerr << "cuda-agent serve: " << line << std::endl; };
  std::vector<std::string> extra;
  try {
    extra = detail::shell_words(options.worker_arguments);
  } catch (const std::invalid_argument& error) {
    throw UsageError(std::string("--worker-arguments: ") + error.what());
  }
  const std::string program = options.worker_program.empty() ? std::filesystem::read_symlink("/proc/self/exe").string()
                                                             : options.worker_program.string();
  // Submission ids are unique for the cluster's lifetime: a coordinator started again must
  // not reuse its predecessor's.
  const std::string instance = detail::random_hex(4);
  fleet.make_launch = [=](std::size_t index, std::size_t attempt) {
    WorkerLaunch launch;
    launch.name = "cuda-agent-worker-" + instance + "-" + std::to_string(index) + "-" + std::to_string(attempt);
    launch.command = {program, "worker", "--coordinator", *coordinator_url, "--name", launch.name};
    if (options.gpus_per_worker > 0) launch.command.insert(launch.command.end(), {"--gpus", "visible"});
    launch.command.insert(launch.command.end(), extra.begin(), extra.end());
    launch.environment = {{"CUDA_AGENT_WORKER_TOKEN", token}};
    launch.gpus = options.gpus_per_worker;
    launch.cpus = options.cpus_per_worker;
    launch.labels = {{"cuda_agent_coordinator", *coordinator_url}, {"cuda_agent_worker", std::to_string(index)}};
    return launch;
  };
  return fleet;
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
  if (options.workers_only) options.accept_workers = true;
  const LaunchedWorkerOptions& launched = options.launched;
  std::optional<AnyWorkerLauncher> engine;
  // Said before anything starts: a cluster that is not there fails here.
  std::string engine_description;
  if (!launched.ray_address.empty() && launched.slurm) throw UsageError("--ray-address and --slurm: give one engine");
  if ((!launched.slurm_partition.empty() || !launched.slurm_options.empty() || !launched.slurm_log_directory.empty()) &&
      !launched.slurm)
    throw UsageError("--slurm-partition, --slurm-option and --slurm-log-dir: give --slurm too");
  if (!launched.ray_address.empty()) {
    try {
      RayJobLauncher ray(RayJobLauncherOptions{launched.ray_address});
      engine_description = "Ray " + ray.version() + " at " + launched.ray_address;
      engine.emplace(std::move(ray));
    } catch (const std::invalid_argument& error) {
      throw UsageError(std::string("--ray-address: ") + error.what());
    }
  } else if (launched.slurm) {
    SlurmJobLauncherOptions slurm;
    slurm.partition = launched.slurm_partition;
    slurm.sbatch_arguments = launched.slurm_options;
    slurm.log_directory = launched.slurm_log_directory;
    if (!find_program("sbatch", Environment::inherit_all()))
      throw UsageError("--slurm: sbatch is not on the PATH (is this host a Slurm submit host?)");
    SlurmJobLauncher launcher(std::move(slurm));
    engine_description = launcher.describe();
    engine.emplace(std::move(launcher));
  }
  if (engine) {
    options.accept_workers = true;
    if (launched.coordinator_url.empty() && (http.host == "0.0.0.0" || http.host == "::" || http.host.empty()))
      throw UsageError("--listen " + options.listen +
                       " names no address the worker jobs can reach: give --coordinator-url");
  }
  if (!options.worker_tokens.empty()) {
    if (!options.accept_workers) throw UsageError("--worker-tokens: give --accept-workers too");
    http.worker_tokens = read_worker_tokens(options.worker_tokens);
  }
  // The launched workers' token lives as long as this process: made here, handed to each job in
  // its environment, never written anywhere.
  std::string launched_worker_token;
  if (engine) {
    launched_worker_token = detail::random_hex(24);
    http.worker_tokens[launched_worker_token] = "launched-worker";
  }
  if (options.accept_workers && http.worker_tokens.empty() && (!http.tokens.empty() || !is_loopback_host(http.host)))
    throw UsageError(
        "--accept-workers with --tokens or beyond loopback: give the workers tokens of their own "
        "(--worker-tokens FILE)");
  const std::vector<int> devices = settle_local_slots(options.local);
  set_local_slots(options.local, devices, service.pool);
  if (options.workers_only) {
    service.pool.slots.clear();
    service.pool.device_memory_bytes = 0;
  }
  service.pool.remote_workers = options.accept_workers;
  service.pool.worker_timeout = std::chrono::seconds(options.worker_timeout_seconds);
  service.pool.quarantine_after = static_cast<std::size_t>(options.quarantine_after);
  service.pool.max_pending = static_cast<std::size_t>(options.max_pending);
  service.state_directory = std::filesystem::absolute(options.state_directory);
  service.allow_host_paths = options.allow_host_paths;
  service.policy = {{"tolerance", options.local.evaluator.strict ? "strict" : "default"},
                    {"timing", !options.local.evaluator.no_profile},
                    {"timing_budget",
                     {{"seconds", options.local.evaluator.timing_seconds}, {"max_rounds", TimingBudget{}.max_rounds}}},
                    {"libraries", VerificationPolicy{}.libraries},
                    {"reward", options.reward},
                    {"device", options.local.device}};
  // A fix to the evaluator, or another GPU or torch, must not be answered from results the
  // old one cached.
  service.pool.environment = evaluation_environment(options.local, devices, service.policy);
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

  raise_descriptor_limit();

  sigset_t stop_signals = block_stop_signals();

  // Before the pool: a quarantined worker that the fleet started is replaced.
  std::string coordinator_url = launched.coordinator_url;
  std::optional<WorkerFleet> fleet;
  if (engine) {
    fleet.emplace(std::move(*engine), launched_fleet_options(launched, &coordinator_url, launched_worker_token));
    http.launched_workers = [&fleet] { return fleet->status(); };
  }
  service.pool.on_quarantine = [&fleet](const std::string& worker, const WorkerRegistration& registration,
                                        const std::string& why) {
    std::cerr << "cuda-agent serve: quarantined worker " << worker << " (" << registration.name << "): " << why
              << std::endl;
    if (fleet && fleet->replace(registration.name, "quarantined: " + why))
      std::cerr << "cuda-agent serve: its job is to be replaced" << std::endl;
  };

  const TrustedSlotSettings& settings = options.local.evaluator;
  EvaluationService evaluations(
      service, make_evaluator(settings, PoolSlot{options.local.device, devices.front()}, work / "builder"),
      slot_evaluators(settings, work));
  std::optional<EpisodeService> episodes;
  if (!options.no_episodes) {
    StandardEpisodeToolboxOptions tools;
    tools.work_directory = work / "episode-tools";
    tools.device = options.local.device;
    tools.gpu = devices.front();
    tools.python = options.local.evaluator.python;
    tools.compile_cache_directory = options.local.evaluator.cache_directory;
    if (options.local.evaluator.strict) tools.verification.tolerance = TolerancePolicy::strict();
    tools.timing = !options.local.evaluator.no_profile;
    tools.timing_seconds = options.local.evaluator.timing_seconds;
    if (options.local.evaluator.unconfined)
      tools.make_sandbox = [](SandboxOptions sandbox) { return AnySandbox(ProcessSandbox(std::move(sandbox))); };
    EpisodeServiceOptions episode_options;
    episode_options.state_directory = service.state_directory / "episodes";
    episode_options.workspace.device = options.local.device;
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
            << " " << options.local.device << " slots, " << service.pool.build_workers << " build workers, "
            << (options.accept_workers ? "remote workers taken, " : "") << "state in "
            << service.state_directory.string() << ", " << evaluations.health()["recovered"].get<std::size_t>()
            << " recovered" << (episodes ? ", " + std::to_string(episodes->size()) + " episodes reopened" : "") << ")"
            << std::endl;
  if (fleet) {
    if (coordinator_url.empty())
      coordinator_url = "http://" + (http.host.find(':') != std::string::npos ? "[" + http.host + "]" : http.host) +
                        ":" + std::to_string(port);
    try {
      fleet->start();
    } catch (const std::exception&) {
      server.stop();
      listener.join();
      throw;
    }
    std::cout << "cuda-agent serve: keeping " << launched.workers << " worker jobs on " << engine_description << " ("
              << launched.gpus_per_worker << " GPUs, " << launched.cpus_per_worker
              << " CPUs each); they reach this coordinator at " << coordinator_url << std::endl;
  }

  int received = 0;
  sigwait(&stop_signals, &received);
  std::cout << "cuda-agent serve: " << (received == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": draining (new requests are refused; accepted ones finish)" << std::endl;
  evaluations.drain();
  // After the drain: the accepted requests needed the workers.
  if (fleet) {
    fleet->stop();
    const nlohmann::json jobs = fleet->status();
    std::cout << "cuda-agent serve: stopped the worker jobs (" << jobs["replacements"].get<std::size_t>()
              << " replaced while serving)" << std::endl;
  }
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
