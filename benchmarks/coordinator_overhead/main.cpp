// SPDX-License-Identifier: Apache-2.0
// What a coordinator (`cuda-agent serve --workers-only`) costs when many remote workers
// serve it: WORKERS `RemoteWorker`s over HTTP on loopback, each with a pool of its own whose
// evaluator answers at once, take REQUESTS new requests (none the cache can answer) from
// one coordinator. What is timed is placement: the leases, the results coming back, the
// journal, the HTTP round trips; no evaluation costs anything.
//
//   cuda_agent_benchmark_coordinator_overhead [WORKERS [REQUESTS [CAPACITY]]]   (default 64, 4000, 2)
//
// Prints the time until every worker registered, the requests per second the coordinator
// placed and saw finished, and p50/p99 of each request's time from submission to result.
#include "../service_common/instant_evaluator.hpp"

#include <cuda_agent/server/coordinator_link.hpp>
#include <cuda_agent/server/http_service.hpp>
#include <cuda_agent/service/remote_worker.hpp>

#include <chrono>      // steady_clock
#include <cstdio>      // printf
#include <cstdlib>     // atoi
#include <filesystem>  // path
#include <memory>      // unique_ptr
#include <string>      // string
#include <thread>      // jthread
#include <vector>      // vector

namespace ca = cuda_agent;
using cuda_agent::benchmarks::InstantEvaluator;
using cuda_agent::benchmarks::percentile;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  cuda_agent::benchmarks::raise_open_file_limit();
  const int workers = argc > 1 ? std::atoi(argv[1]) : 64;
  const int requests = argc > 2 ? std::atoi(argv[2]) : 4000;
  const int capacity = argc > 3 ? std::atoi(argv[3]) : 2;
  if (workers < 1 || requests < 1 || capacity < 1) {
    std::fprintf(stderr, "usage: %s [WORKERS [REQUESTS [CAPACITY]]] (each at least 1)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-coordinator-overhead-" + ca::detail::random_hex(4));
  const std::string token = "worker-token-" + ca::detail::random_hex(12);
  int status = 0;
  {
    ca::EvaluationServiceOptions options;
    options.pool.slots = {};  // --workers-only: every request goes to a worker
    options.pool.remote_workers = true;
    options.pool.worker_timeout = std::chrono::seconds(30);
    options.pool.max_pending = static_cast<std::size_t>(requests) + 16;
    options.pool.work_directory = root / "coordinator" / "pool";
    options.state_directory = root / "coordinator" / "state";
    options.default_client.max_in_flight = static_cast<std::size_t>(requests) + 16;
    ca::EvaluationService service(options, InstantEvaluator{},
                                  [](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(InstantEvaluator{}); });
    ca::HttpServiceOptions http;
    http.port = 0;
    http.threads = static_cast<std::size_t>(2 * workers + 8);  // each worker keeps a lease waiting
    http.worker_tokens = {{token, "simulated"}};
    ca::HttpService server(service, http);
    const int port = server.bind();
    std::thread listener([&] { server.run(); });

    // New requests, in batches of 100 as a trainer's rollouts come: none alike, so none is
    // answered from the cache.
    std::vector<std::string> ids;
    std::vector<double> submitted_at;  // unix seconds, as the service's events give them
    const auto submitted = std::chrono::steady_clock::now();
    for (int first = 0; first < requests; first += 100) {
      const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      nlohmann::json batch = nlohmann::json::array();
      for (int i = first; i < std::min(requests, first + 100); ++i)
        batch.push_back({{"task", {{"name", "relu"}, {"source", "# relu\n"}}},
                         {"candidate", {{"files", {{"model_new.py", "# candidate " + std::to_string(i) + "\n"}}}}}});
      const nlohmann::json answer = service.submit({{"requests", batch}});
      for (const auto& evaluation : answer["evaluations"]) {
        ids.push_back(evaluation["id"]);
        submitted_at.push_back(now);
      }
    }
    const double submit_seconds = seconds_since(submitted);

    // Then the workers: what they take from here on is the coordinator's placement alone.
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<ca::RemoteWorker<ca::HttpCoordinatorLink>>> fleet;
    std::vector<std::jthread> serving;
    for (int w = 0; w < workers; ++w) {
      ca::EvaluationPoolOptions pool;
      pool.slots = {{"cpu", 0}};
      pool.build_workers = 1;
      pool.work_directory = root / ("worker-" + std::to_string(w));
      ca::RemoteWorkerOptions worker;
      worker.registration = {"simulated-" + std::to_string(w), static_cast<std::size_t>(capacity),
                             nlohmann::json::object(), "simulated"};
      worker.lease_wait = std::chrono::milliseconds(2'000);
      fleet.push_back(std::make_unique<ca::RemoteWorker<ca::HttpCoordinatorLink>>(
          ca::HttpCoordinatorLink({"http://127.0.0.1:" + std::to_string(port), token}), pool,
          ca::AnyStagedEvaluator(InstantEvaluator{}),
          [](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(InstantEvaluator{}); }, worker));
      serving.emplace_back([&remote = *fleet.back()](const std::stop_token& stop) { remote.run(stop); });
    }
    while (service.workers()["workers"].size() < static_cast<std::size_t>(workers)) {
      if (seconds_since(started) > 60) {
        std::fprintf(stderr, "only %zu of %d workers registered within 60 s\n", service.workers()["workers"].size(),
                     workers);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("%d workers (capacity %d each) registered in %.2f s\n", workers, capacity, seconds_since(started));

    std::vector<double> latencies;
    int failed = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const nlohmann::json finished = service.wait(ids[i], std::chrono::seconds(120));
      if (finished.value("stage", "") != "finished" || finished.value("outcome", "") != "evaluated") {
        ++failed;
        continue;
      }
      for (const nlohmann::json& event : service.events(ids[i], 0, std::chrono::milliseconds(0)).events)
        if (event.value("stage", "") == "finished" && event.contains("at"))
          latencies.push_back(event["at"].get<double>() - submitted_at[i]);
    }
    const double all_seconds = seconds_since(started);
    for (std::jthread& thread : serving) thread.request_stop();  // all at once, then each joined
    serving.clear();
    std::size_t leased = 0;  // read once every worker has sent what it will
    for (const auto& remote : fleet) leased += remote->counters().sent;
    std::printf(
        "%d new requests submitted (journaled, files written) in %.2f s: %.0f requests/s; then placed on the "
        "workers and finished in %.2f s from the first worker's start: %.0f requests/s; submission to result "
        "p50 %.0f ms p99 %.0f ms; %zu results counted from workers; %d failed\n",
        requests, submit_seconds, static_cast<double>(requests) / submit_seconds, all_seconds,
        static_cast<double>(requests) / all_seconds, 1000 * percentile(latencies, 0.5),
        1000 * percentile(latencies, 0.99), leased, failed);
    if (failed != 0 || leased != static_cast<std::size_t>(requests)) status = 1;
    fleet.clear();
    server.stop();
    listener.join();
  }
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
  return status;
}
