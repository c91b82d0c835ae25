// SPDX-License-Identifier: Apache-2.0
// What the evaluation service costs a client, beyond the evaluations themselves: an
// evaluator that answers at once stands in for the trusted one, so what is timed is HTTP,
// the schema check, the journal (synced to disk per accepted request) and the pool.
//
//   cuda_agent_benchmark_service_overhead [CLIENTS [REQUESTS_PER_CLIENT]]   (default 64 and 50)
//
// Phase 1: CLIENTS threads, each with its own connection, submit the same candidate with
// ?wait (the first is evaluated, the rest are answered from the pool's result cache) and
// read it back with GET; p50 and p99 of each. Phase 2: 1,000 clients at once, one request
// each (new connections), counted for failures.
#include "../service_common/instant_evaluator.hpp"

#include <cuda_agent/server/http_service.hpp>

#include <atomic>      // atomic
#include <chrono>      // steady_clock
#include <cstdio>      // printf
#include <cstdlib>     // atoi
#include <filesystem>  // path
#include <map>         // map
#include <mutex>       // mutex
#include <string>      // string
#include <thread>      // thread
#include <vector>      // vector

namespace ca = cuda_agent;
using cuda_agent::benchmarks::InstantEvaluator;
using cuda_agent::benchmarks::percentile;

namespace {

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  cuda_agent::benchmarks::raise_open_file_limit();
  const int clients = argc > 1 ? std::atoi(argv[1]) : 64;
  const int per_client = argc > 2 ? std::atoi(argv[2]) : 50;
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-service-overhead-" + ca::detail::random_hex(4));
  ca::EvaluationServiceOptions options;
  options.pool.slots = {{"cpu", 0}};
  options.pool.max_pending = 4096;
  options.pool.work_directory = root / "pool";
  options.state_directory = root / "state";
  options.default_client.max_in_flight = 4096;
  int status = 0;
  {
    ca::EvaluationService service(options, InstantEvaluator{},
                                  [](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(InstantEvaluator{}); });
    ca::HttpServiceOptions http;
    http.port = 0;
    http.threads = 128;
    ca::HttpService server(service, http);
    const int port = server.bind();
    std::thread listener([&] { server.run(); });
    const std::string body =
        nlohmann::json{{"task", {{"name", "relu"}, {"source", "# relu\n"}}},
                       {"candidate", {{"files", {{"model_new.py", "# the same candidate every time\n"}}}}}}
            .dump();

    std::mutex mutex;
    std::map<std::string, int> why;  // failures by kind
    std::vector<double> posts;
    std::vector<double> gets;
    std::atomic<int> failures{0};
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&] {
        httplib::Client client("127.0.0.1", port);
        client.set_keep_alive(true);
        std::vector<double> mine_posts;
        std::vector<double> mine_gets;
        for (int i = 0; i < per_client; ++i) {
          auto start = std::chrono::steady_clock::now();
          auto posted = client.Post("/v1/evaluations?wait=10", body, "application/json");
          mine_posts.push_back(milliseconds_since(start));
          if (!posted || posted->status != 200) {
            ++failures;
            const std::lock_guard lock(mutex);
            ++why[posted ? "HTTP " + std::to_string(posted->status) : httplib::to_string(posted.error())];
            continue;
          }
          const std::string id = nlohmann::json::parse(posted->body)["evaluations"][0]["id"];
          start = std::chrono::steady_clock::now();
          auto got = client.Get("/v1/evaluations/" + id);
          mine_gets.push_back(milliseconds_since(start));
          if (!got || got->status != 200) ++failures;
        }
        const std::lock_guard lock(mutex);
        posts.insert(posts.end(), mine_posts.begin(), mine_posts.end());
        gets.insert(gets.end(), mine_gets.begin(), mine_gets.end());
      });
    for (auto& thread : threads) thread.join();
    const double seconds = milliseconds_since(started) / 1000;
    std::printf(
        "%d clients x %d: %zu POST ?wait (cached after the first) p50 %.2f ms p99 %.2f ms; GET p50 %.2f ms "
        "p99 %.2f ms; %.0f requests/s; %d failed\n",
        clients, per_client, posts.size(), percentile(posts, 0.5), percentile(posts, 0.99), percentile(gets, 0.5),
        percentile(gets, 0.99), static_cast<double>(posts.size() + gets.size()) / seconds, failures.load());
    if (failures.load() != 0) status = 1;

    // 1,000 clients at once, one request each, each on a connection of its own.
    std::atomic<int> crowd_failures{0};
    std::vector<double> crowd;
    threads.clear();
    const auto crowd_started = std::chrono::steady_clock::now();
    for (int c = 0; c < 1000; ++c)
      threads.emplace_back([&] {
        httplib::Client client("127.0.0.1", port);
        client.set_connection_timeout(30, 0);
        client.set_read_timeout(60, 0);
        const auto start = std::chrono::steady_clock::now();
        auto posted = client.Post("/v1/evaluations?wait=30", body, "application/json");
        const double taken = milliseconds_since(start);
        if (!posted || posted->status != 200) {
          ++crowd_failures;
          const std::lock_guard lock(mutex);
          ++why[posted ? "HTTP " + std::to_string(posted->status) : httplib::to_string(posted.error())];
        }
        const std::lock_guard lock(mutex);
        crowd.push_back(taken);
      });
    for (auto& thread : threads) thread.join();
    std::printf("1000 clients at once, one POST each: p50 %.2f ms p99 %.2f ms, all done in %.2f s; %d failed\n",
                percentile(crowd, 0.5), percentile(crowd, 0.99), milliseconds_since(crowd_started) / 1000,
                crowd_failures.load());
    if (crowd_failures.load() != 0) status = 1;
    for (const auto& [kind, count] : why) std::printf("  failed: %s x %d\n", kind.c_str(), count);
    server.stop();
    listener.join();
  }
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
  return status;
}
