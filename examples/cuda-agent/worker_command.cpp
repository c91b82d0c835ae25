// SPDX-License-Identifier: Apache-2.0
// `cuda-agent worker`: the GPUs of this machine serving a `cuda-agent serve --accept-workers`
// coordinator (service/remote_worker.hpp over server/coordinator_link.hpp).
#include <cuda_agent/server/coordinator_link.hpp>
#include <cuda_agent/service/remote_worker.hpp>
#include <cuda_agent/version.hpp>

#include <algorithm>   // max
#include <chrono>      // seconds
#include <csignal>     // SIGTERM, SIGINT
#include <cstdlib>     // getenv
#include <filesystem>  // path
#include <fstream>     // ifstream
#include <iostream>    // cout, cerr
#include <memory>      // make_shared
#include <mutex>       // mutex, lock_guard
#include <stop_token>  // stop_source
#include <string>      // string
#include <thread>      // jthread, hardware_concurrency
#include <vector>      // vector

#include <pthread.h>  // pthread_sigmask
#include <signal.h>   // sigset_t, sigwait
#include <unistd.h>   // gethostname, getpid

#include <httplib.h>

#include "command_line.hpp"
#include "commands.hpp"
#include "trusted_slots.hpp"

namespace cuda_agent::cli {
namespace {

constexpr const char* worker_description =
    R"(Serves a coordinator (cuda-agent serve --accept-workers) with the devices of this
machine: registers, takes whole evaluation requests up to its free capacity, evaluates
them in a pool of its own (builds on CPU workers, verification slots that share each
device, timing alone on it) and sends back each result. Each request comes with its
policy (tolerance profile, library policy, timing budget: the coordinator's own with the
request's choices), which the worker evaluates with, so that its verdicts are the
coordinator's.

A coordinator that cannot be reached is tried again with back-off; one that lost this
worker (it was not heard from in time) has given its requests to others: the worker drops
them and registers again. SIGTERM or SIGINT: the worker deregisters (what it held goes to
other workers) and exits. The token comes from --token-file or $CUDA_AGENT_WORKER_TOKEN.

It tells the coordinator its environment (GPU, driver, torch, cuda-agent), under which its
results are cached. A worker whose results are infrastructure errors in a row (a broken
GPU) is quarantined by the coordinator: it gets no more work; restart it once it is fixed.)";

struct WorkerOptions {
  std::string coordinator;
  std::filesystem::path token_file;
  std::string name;
  LocalSlotOptions local;
  int capacity = 0;
  std::filesystem::path work_directory;
  bool quiet = false;
};

void add_worker_options(CLI::App& command, WorkerOptions& o) {
  command.add_option("--coordinator", o.coordinator, "the coordinator's address, http://HOST:PORT")
      ->required()
      ->type_name("URL");
  command.add_option("--token-file", o.token_file, "a file holding this worker's bearer token")->type_name("FILE");
  command.add_option("--name", o.name, "how the coordinator shows this worker (default: host name and devices)")
      ->type_name("NAME");
  add_local_slot_options(command, o.local);
  command.add_option("--capacity", o.capacity, "requests held at once (default: twice the slots)")
      ->check(whole_number(1, 4096))
      ->type_name("N");
  command
      .add_option("--work-dir", o.work_directory,
                  "builds, harness workers and baselines (default: a new temporary one)")
      ->type_name("DIR");
  command.add_flag("--quiet", o.quiet, "no line per finished evaluation");
}

std::string read_token(const WorkerOptions& options) {
  if (options.token_file.empty()) {
    const char* from_environment = std::getenv("CUDA_AGENT_WORKER_TOKEN");
    return from_environment != nullptr ? from_environment : "";
  }
  std::ifstream stream(options.token_file);
  std::string token;
  if (!stream || !(stream >> token))
    throw UsageError("--token-file: cannot read a token from " + options.token_file.string());
  return token;
}

/// What the coordinator evaluates with (its /healthz policy): a worker must judge alike.
nlohmann::json coordinator_policy(const std::string& url) {
  httplib::Client client(url);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::seconds(30));
  for (int attempt = 1;; ++attempt) {
    const httplib::Result answer = client.Get("/healthz");
    if (answer && (answer->status == 200 || answer->status == 503)) {
      const nlohmann::json health = nlohmann::json::parse(answer->body, nullptr, false);
      if (health.is_object() && health.contains("policy")) {
        if (health.value("remote_workers", nlohmann::json()).is_null())
          throw std::runtime_error("the coordinator " + url +
                                   " takes no remote workers: start it with cuda-agent serve --accept-workers");
        return health["policy"];
      }
      throw std::runtime_error("the coordinator " + url +
                               " answered /healthz without its policy: is it cuda-agent serve?");
    }
    if (attempt == 30)
      throw std::runtime_error(
          "cannot reach the coordinator " + url +
          " (/healthz): " + (answer ? "HTTP " + std::to_string(answer->status) : httplib::to_string(answer.error())));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int run_worker(WorkerOptions& options) {
  HttpCoordinatorLinkOptions link;
  link.url = options.coordinator;
  link.token = read_token(options);
  if (options.coordinator.rfind("http://", 0) != 0 && options.coordinator.rfind("https://", 0) != 0)
    throw UsageError("--coordinator: expects http://HOST:PORT, not '" + options.coordinator + "'");
  const std::vector<int> devices = settle_local_slots(options.local);

  const nlohmann::json policy = coordinator_policy(options.coordinator);
  options.local.evaluator.strict = policy.value("tolerance", std::string("default")) == "strict";
  options.local.evaluator.no_profile = !policy.value("timing", true);
  if (policy.value("device", options.local.device) != options.local.device)
    std::cerr << "cuda-agent worker: the coordinator evaluates on " << policy.value("device", std::string())
              << ", this worker on " << options.local.device << std::endl;

  EvaluationPoolOptions pool;
  set_local_slots(options.local, devices, pool);
  const std::filesystem::path work =
      options.work_directory.empty()
          ? std::filesystem::temp_directory_path() / ("cuda-agent-worker-" + std::to_string(::getpid()))
          : std::filesystem::absolute(options.work_directory);
  detail::make_open_directory(work);
  pool.work_directory = work / "pool";
  // Sent to the coordinator when registering, which caches this worker's results under it.
  pool.environment = evaluation_environment(options.local, devices, policy);

  RemoteWorkerOptions worker;
  if (options.name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    options.name = std::string(host) + "/" + options.local.device + ":" + options.local.gpus;
  }
  worker.registration.name = options.name;
  worker.registration.capacity = static_cast<std::size_t>(options.capacity);
  worker.registration.description = {{"version", CUDA_AGENT_VERSION_STRING},
                                     {"device", options.local.device},
                                     {"slots", pool.slots.size()},
                                     {"pid", ::getpid()}};
  worker.on_notice = [](const std::string& line) { std::cerr << "cuda-agent worker: " << line << std::endl; };
  if (!options.quiet)
    worker.on_result = [](const std::string& lease, const PoolResult& result) {
      std::cerr << "cuda-agent worker: " << lease << " " << to_string(result.outcome)
                << (result.cached ? " (cached)" : "")
                << (result.message.empty() ? "" : ": " + result.message.substr(0, 200)) << std::endl;
    };

  raise_descriptor_limit();
  sigset_t stop_signals = block_stop_signals();

  const TrustedSlotSettings& settings = options.local.evaluator;
  RemoteWorker<HttpCoordinatorLink> remote(
      HttpCoordinatorLink(link), pool,
      make_evaluator(settings, PoolSlot{options.local.device, devices.front()}, work / "builder"),
      slot_evaluators(settings, work), worker);
  std::cout << "cuda-agent worker: serving " << options.coordinator << " with " << pool.slots.size() << " "
            << options.local.device << " slots (tolerance " << (settings.strict ? "strict" : "default")
            << (settings.no_profile ? ", verify only" : "") << ", work in " << work.string() << ")" << std::endl;

  std::stop_source stop;
  std::jthread serving([&remote, &stop] {
    remote.run(stop.get_token());
    // Refused for good: wake the signal wait below.
    if (!stop.stop_requested()) ::kill(::getpid(), SIGTERM);
  });
  int received = 0;
  sigwait(&stop_signals, &received);
  const bool refused = !remote.refusal().empty();
  if (!refused)
    std::cout << "cuda-agent worker: " << (received == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": deregistering (what this worker holds goes to others)" << std::endl;
  stop.request_stop();
  serving.join();
  const RemoteWorkerCounters counters = remote.counters();
  std::cout << "cuda-agent worker: " << counters.leased << " taken, " << counters.sent << " results counted, "
            << counters.dropped << " dropped, " << counters.registrations << " registrations" << std::endl;
  if (refused) {
    std::cerr << "cuda-agent worker: " << remote.refusal() << std::endl;
    return 3;
  }
  return 0;
}

}  // namespace

void add_worker_command(CLI::App& program, int& exit_status) {
  auto options = std::make_shared<WorkerOptions>();
  CLI::App* command = program.add_subcommand(
      "worker", "serve a coordinator (cuda-agent serve --accept-workers) with this machine's GPUs");
  command->footer(std::string(worker_description) +
                  "\n\nexit status: 0 stopped by a signal, 2 usage error, 3 failed "
                  "or refused by the coordinator");
  add_worker_options(*command, *options);
  command->callback([options, &exit_status] { exit_status = run_worker(*options); });
}

}  // namespace cuda_agent::cli
