// SPDX-License-Identifier: Apache-2.0
// Remote workers: a coordinator pool that gives whole requests to workers (leases, results
// counted once, lost workers' requests given back to the queue, cancellation told at the
// next heartbeat, the cache kept by the workers' environments, quarantine of a worker that
// fails everything, and bounded attempts of a request every worker fails), and
// `RemoteWorker` serving it in the same process with a scripted evaluator: workers stopped
// or cut off in the middle of a batch, and every request still gets exactly one result.
#include "catch.hpp"

#include <cuda_agent/service/remote_worker.hpp>
#include <cuda_agent/service/worker_protocol.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "service/scripted_evaluator.hpp"

namespace ca = cuda_agent;
using namespace std::chrono_literals;
using cuda_agent::testing::Script;
using cuda_agent::testing::ScriptedEvaluator;

namespace {

struct Coordinator {
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-remote-test-" + ca::detail::random_hex(4));
  std::unique_ptr<ca::EvaluationPool> pool;

  explicit Coordinator(std::chrono::milliseconds worker_timeout = 5s,
                       const std::function<void(ca::EvaluationPoolOptions&)>& configure = nullptr) {
    std::filesystem::create_directories(root);
    ca::EvaluationPoolOptions options;
    options.slots.clear();
    options.remote_workers = true;
    options.worker_timeout = worker_timeout;
    options.work_directory = root / "coordinator";
    if (configure) configure(options);
    // Never called: a coordinator without slots builds and verifies nothing itself.
    const auto refuse = [](const ca::PoolSlot&) -> ca::AnyStagedEvaluator {
      throw std::logic_error("a coordinator without slots made a slot evaluator");
    };
    pool = std::make_unique<ca::EvaluationPool>(options, ScriptedEvaluator{std::make_shared<Script>()}, refuse);
  }
  ~Coordinator() {
    pool.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }

  ca::EvaluationRequest request(const std::string& task_name, const std::string& text = "") {
    ca::EvaluationRequest request;
    request.task.name = task_name;
    request.task.reference_source = "# " + task_name + "\n";
    request.candidate_directory = root / ("candidate-" + ca::detail::random_hex(4));
    std::filesystem::create_directories(request.candidate_directory / "kernels");
    std::ofstream(request.candidate_directory / "model_new.py") << "# " << (text.empty() ? task_name : text) << "\n";
    return request;
  }
};

ca::PoolResult wait_for_result(const ca::EvaluationPool::Ticket& ticket) {
  REQUIRE(ticket.result.wait_for(60s) == std::future_status::ready);
  return ticket.result.get();
}

ca::PoolResult correct_result(const std::string& device = "cpu:0") {
  ca::PoolResult result;
  result.outcome = ca::PoolOutcome::evaluated;
  result.device = device;
  ca::Evaluation evaluation;
  evaluation.compile.succeeded = true;
  evaluation.verification = ca::VerificationResult{};
  evaluation.verification->correct = true;
  result.evaluation = evaluation;
  return result;
}

/// What a worker whose GPU is broken sends for every request.
ca::PoolResult broken_gpu_result() {
  ca::PoolResult result;
  result.outcome = ca::PoolOutcome::infrastructure_error;
  result.message = "the verification stage failed (not the candidate's fault): CUDA error: an illegal memory access";
  return result;
}

/// The coordinator's pool in the same process, as a worker reaches it; while `cut` is set,
/// every call fails as an unreachable coordinator's would.
struct InProcessLink {
  ca::EvaluationPool* pool;
  std::shared_ptr<std::atomic<bool>> cut = std::make_shared<std::atomic<bool>>(false);

  void reach() const {
    if (*cut) throw std::runtime_error("connection refused");
  }
  ca::WorkerGrant register_worker(const ca::WorkerRegistration& registration) {
    reach();
    return pool->register_worker(registration);
  }
  std::vector<std::string> heartbeat(const std::string& worker) {
    reach();
    return pool->heartbeat(worker);
  }
  std::vector<ca::WorkerLease> lease(const std::string& worker, std::size_t most, std::chrono::milliseconds wait) {
    reach();
    return pool->lease(worker, most, wait);
  }
  bool complete(const std::string& worker, const std::string& lease, const ca::PoolResult& result) {
    reach();
    return pool->complete(worker, lease, result);
  }
  bool deregister_worker(const std::string& worker) {
    reach();
    return pool->deregister_worker(worker);
  }
};
static_assert(ca::CoordinatorLink<InProcessLink>);

/// The same coordinator, with what goes each way passed through its JSON, as `cuda-agent
/// worker` gets it over HTTP.
struct WireLink : InProcessLink {
  std::vector<ca::WorkerLease> lease(const std::string& worker, std::size_t most, std::chrono::milliseconds wait) {
    return nlohmann::json(InProcessLink::lease(worker, most, wait)).get<std::vector<ca::WorkerLease>>();
  }
  bool complete(const std::string& worker, const std::string& lease, const ca::PoolResult& result) {
    return InProcessLink::complete(worker, lease, nlohmann::json(result).get<ca::PoolResult>());
  }
};
static_assert(ca::CoordinatorLink<WireLink>);

/// A worker with `slots` CPU slots of scripted evaluators, serving `link` on a thread of its own.
template <class Link = InProcessLink>
struct Worker {
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::unique_ptr<ca::RemoteWorker<Link>> worker;
  std::jthread thread;

  Worker(Link link, const std::string& name, std::size_t slots, const std::filesystem::path& root) {
    ca::EvaluationPoolOptions options;
    options.slots.assign(slots, ca::PoolSlot{"cpu", 0});
    options.work_directory = root / (name + "-" + ca::detail::random_hex(3));
    options.environment = "scripted cpu";
    ca::RemoteWorkerOptions worker_options;
    worker_options.registration.name = name;
    worker_options.lease_wait = 200ms;
    worker_options.retry_first = 20ms;
    worker_options.retry_last = 100ms;
    auto shared = script;
    worker = std::make_unique<ca::RemoteWorker<Link>>(
        std::move(link), options, ScriptedEvaluator{script},
        [shared](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(ScriptedEvaluator{shared}); }, worker_options);
    thread = std::jthread([this](const std::stop_token& stop) { worker->run(stop); });
  }
  ~Worker() { stop(); }

  void stop() {
    if (!thread.joinable()) return;
    thread.request_stop();
    thread.join();
  }
};

}  // namespace

TEST_CASE("a coordinator gives whole requests to a remote worker, and counts each result once") {
  Coordinator coordinator;
  const ca::WorkerGrant grant = coordinator.pool->register_worker({"node1", 4, {{"devices", {"cpu:0"}}}, "cpu"});
  CHECK_FALSE(grant.worker.empty());
  CHECK(grant.heartbeat_interval < grant.timeout);
  CHECK(coordinator.pool->counters().workers == 1);
  CHECK(coordinator.pool->lease(grant.worker, 4, 20ms).empty());

  const auto first = coordinator.pool->submit(coordinator.request("relu", "first candidate"));
  const auto second = coordinator.pool->submit(coordinator.request("gelu"));
  const std::vector<ca::WorkerLease> leases = coordinator.pool->lease(grant.worker, 4, 1s);
  REQUIRE(leases.size() == 2);
  CHECK(leases[0].id == first.id);
  CHECK(leases[0].task.name == "relu");
  CHECK(leases[0].task.reference_source == "# relu\n");
  CHECK(leases[0].files.at("model_new.py") == "# first candidate\n");
  CHECK(leases[0].lease != leases[1].lease);
  CHECK(coordinator.pool->stage(first.id) == ca::PoolStage::on_worker);
  CHECK(coordinator.pool->counters().on_worker == 2);
  CHECK(coordinator.pool->remote_workers().at(grant.worker).holds == 2);

  // What the wire carries is what arrives.
  const nlohmann::json registration = ca::WorkerRegistration{"node2", 3, {}, "cuda A100 torch 2.5"};
  CHECK(registration["protocol"] == ca::worker_protocol_version);
  CHECK(registration.get<ca::WorkerRegistration>().environment == "cuda A100 torch 2.5");
  const ca::WorkerLease carried = nlohmann::json(leases[0]).get<ca::WorkerLease>();
  CHECK(carried.files == leases[0].files);
  CHECK(carried.lease == leases[0].lease);
  const ca::PoolResult sent = nlohmann::json(correct_result()).get<ca::PoolResult>();
  REQUIRE(sent.evaluation);
  CHECK(sent.evaluation->correct());

  CHECK(coordinator.pool->complete(grant.worker, leases[0].lease, sent));
  CHECK_FALSE(coordinator.pool->complete(grant.worker, leases[0].lease, sent));  // never twice
  CHECK_FALSE(coordinator.pool->complete(grant.worker, "lease-made-up", sent));
  const ca::PoolResult result = wait_for_result(first);
  CHECK(result.outcome == ca::PoolOutcome::evaluated);
  CHECK(result.device == "node1/cpu:0");
  REQUIRE(result.evaluation);
  CHECK(result.evaluation->correct());

  // A result that is the evaluation's own failure stays an infrastructure error.
  ca::PoolResult broken = correct_result();
  broken.evaluation->verification->correct = false;
  broken.evaluation->verification->rejection =
      ca::Rejection{ca::RejectionReason::harness_error, "the harness crashed", {}};
  CHECK(coordinator.pool->complete(grant.worker, leases[1].lease, broken));
  CHECK(wait_for_result(second).outcome == ca::PoolOutcome::infrastructure_error);
  CHECK_THROWS_AS(coordinator.pool->heartbeat("worker-unknown"), ca::UnknownWorker);
  CHECK_THROWS_AS(nlohmann::json({{"outcome", "won"}}).get<ca::PoolResult>(), std::invalid_argument);
}

TEST_CASE("a lost remote worker's requests go back to the queue, and what it sends later is dropped") {
  Coordinator coordinator(300ms);
  const std::string lost = coordinator.pool->register_worker({"lost", 2, {}, "cpu"}).worker;
  const auto ticket = coordinator.pool->submit(coordinator.request("relu"));
  const std::vector<ca::WorkerLease> taken = coordinator.pool->lease(lost, 2, 1s);
  REQUIRE(taken.size() == 1);
  for (int i = 0; i < 100 && coordinator.pool->counters().requeued == 0; ++i) std::this_thread::sleep_for(20ms);
  CHECK(coordinator.pool->counters().requeued == 1);
  CHECK(coordinator.pool->counters().workers == 0);
  CHECK(coordinator.pool->stage(ticket.id) == ca::PoolStage::queued);
  CHECK_THROWS_AS(coordinator.pool->heartbeat(lost), ca::UnknownWorker);
  CHECK_THROWS_AS(coordinator.pool->lease(lost, 1, 0ms), ca::UnknownWorker);

  const std::string other = coordinator.pool->register_worker({"other", 2, {}, "cpu"}).worker;
  const std::vector<ca::WorkerLease> again = coordinator.pool->lease(other, 2, 1s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].id == ticket.id);
  CHECK(again[0].lease != taken[0].lease);
  CHECK_FALSE(coordinator.pool->complete(lost, taken[0].lease, correct_result()));
  CHECK(coordinator.pool->complete(other, again[0].lease, correct_result()));
  CHECK(wait_for_result(ticket).device == "other/cpu:0");
  CHECK(coordinator.pool->counters().evaluated == 1);
}

TEST_CASE("a request cancelled on a remote worker is told to it, and one it gives back is queued again") {
  Coordinator coordinator;
  const std::string worker = coordinator.pool->register_worker({"node", 4, {}, "cpu torch 2.5"}).worker;
  const auto cancelled = coordinator.pool->submit(coordinator.request("relu"));
  const auto given_back = coordinator.pool->submit(coordinator.request("gelu"));
  const std::vector<ca::WorkerLease> leases = coordinator.pool->lease(worker, 4, 1s);
  REQUIRE(leases.size() == 2);
  CHECK(coordinator.pool->cancel(cancelled.id));
  CHECK(wait_for_result(cancelled).outcome == ca::PoolOutcome::cancelled);
  CHECK(coordinator.pool->heartbeat(worker) == std::vector<std::string>{leases[0].lease});
  CHECK(coordinator.pool->heartbeat(worker).empty());
  CHECK_FALSE(coordinator.pool->complete(worker, leases[0].lease, correct_result()));

  ca::PoolResult stopped;
  stopped.outcome = ca::PoolOutcome::cancelled;
  CHECK(coordinator.pool->complete(worker, leases[1].lease, stopped));
  CHECK(coordinator.pool->stage(given_back.id) == ca::PoolStage::queued);
  CHECK(coordinator.pool->counters().requeued == 1);
  const std::vector<ca::WorkerLease> again = coordinator.pool->lease(worker, 4, 1s);
  REQUIRE(again.size() == 1);
  CHECK(coordinator.pool->complete(worker, again[0].lease, correct_result()));
  CHECK(wait_for_result(given_back).outcome == ca::PoolOutcome::evaluated);

  // The coordinator's cache answers a repeated request without a worker.
  const auto repeated = coordinator.pool->submit(coordinator.request("gelu"));
  CHECK(wait_for_result(repeated).cached);
  CHECK(coordinator.pool->lease(worker, 4, 20ms).empty());
  CHECK(coordinator.pool->deregister_worker(worker));
  CHECK_FALSE(coordinator.pool->deregister_worker(worker));
}

TEST_CASE("remote workers serve a batch, and one stopped in the middle of it loses no request") {
  Coordinator coordinator(2s);
  InProcessLink link{coordinator.pool.get()};
  Worker steady(link, "steady", 2, coordinator.root);
  auto stopping = std::make_unique<Worker<>>(link, "stopping", 2, coordinator.root);
  std::vector<ca::EvaluationPool::Ticket> tickets;
  for (int i = 0; i < 24; ++i)
    tickets.push_back(coordinator.pool->submit(coordinator.request("slow", std::to_string(i))));
  // Stopped once it took work: what it held goes to the other worker.
  for (int i = 0; i < 500 && stopping->worker->counters().leased == 0; ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(stopping->worker->counters().leased > 0);
  stopping->stop();
  std::map<std::string, int> devices;
  for (const auto& ticket : tickets) {
    const ca::PoolResult result = wait_for_result(ticket);
    CHECK(result.outcome == ca::PoolOutcome::evaluated);
    ++devices[result.device.substr(0, result.device.find('/'))];
  }
  const ca::PoolCounters counters = coordinator.pool->counters();
  CHECK(counters.evaluated == 24);
  CHECK(counters.unfinished() == 0);
  CHECK(devices["steady"] > 0);
  // Each worker said its pool's environment when it registered.
  for (const auto& [id, worker] : coordinator.pool->remote_workers())
    CHECK(worker.registration.environment == "scripted cpu");
  // A worker counts a result as sent once the coordinator's answer is back, just after the
  // request finished there.
  const auto sent = [&] { return steady.worker->counters().sent + stopping->worker->counters().sent; };
  for (int i = 0; i < 200 && sent() < 24; ++i) std::this_thread::sleep_for(10ms);
  CHECK(sent() == 24);
  CHECK(coordinator.pool->counters().workers == 1);
}

TEST_CASE("a request's policy travels with its lease, and the remote worker's evaluators apply it") {
  Coordinator coordinator;
  ca::EvaluationRequest request = coordinator.request("relu");
  request.policy = {{"tolerance", "strict"},
                    {"libraries", {{"cublas", false}}},
                    {"timing_budget", {{"seconds", 0.5}, {"max_rounds", 30}}},
                    {"reward", "speedup"}};
  const auto ticket = coordinator.pool->submit(request);
  Worker<WireLink> worker(WireLink{{coordinator.pool.get()}}, "node1", 1, coordinator.root);
  const ca::PoolResult result = wait_for_result(ticket);
  REQUIRE(result.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(result.evaluation);
  // As the coordinator's own slots would have taken it.
  const nlohmann::json expected = request.policy.get<ca::EvaluationPolicy>();
  CHECK(expected["tolerance"] == "strict");
  CHECK(result.evaluation->verification->details["policy"] == expected);
  REQUIRE(result.evaluation->profile);
  CHECK(result.evaluation->profile->details["policy"] == expected);
}

namespace {

/// A coordinator whose requests name a tolerance profile this worker does not know (a newer
/// version's, say).
struct NewerCoordinatorLink : WireLink {
  std::vector<ca::WorkerLease> lease(const std::string& worker, std::size_t most, std::chrono::milliseconds wait) {
    std::vector<ca::WorkerLease> leases = WireLink::lease(worker, most, wait);
    for (ca::WorkerLease& each : leases) each.policy["tolerance"] = "bitwise";
    return leases;
  }
};

}  // namespace

TEST_CASE("a lease whose policy the worker cannot apply comes back as an infrastructure error, never a verdict") {
  Coordinator coordinator;
  const auto ticket = coordinator.pool->submit(coordinator.request("relu"));
  Worker<NewerCoordinatorLink> worker(NewerCoordinatorLink{{{coordinator.pool.get()}}}, "old-node", 1,
                                      coordinator.root);
  const ca::PoolResult result = wait_for_result(ticket);
  CHECK(result.outcome == ca::PoolOutcome::infrastructure_error);
  CHECK_FALSE(result.evaluation);
  CHECK(result.message.find("bitwise") != std::string::npos);
  CHECK(worker.script->prepared.empty());
}

TEST_CASE("a remote worker cut off from its coordinator drops what it held, registers again and goes on") {
  Coordinator coordinator(300ms);
  InProcessLink link{coordinator.pool.get()};
  Worker worker(link, "flaky", 1, coordinator.root);
  for (int i = 0; i < 200 && worker.worker->worker_id().empty(); ++i) std::this_thread::sleep_for(5ms);
  const std::string first_id = worker.worker->worker_id();
  REQUIRE_FALSE(first_id.empty());
  // The request is held on the worker's slot while the coordinator cannot be reached.
  const auto held = coordinator.pool->submit(coordinator.request("hold"));
  for (int i = 0; i < 500 && worker.script->verified.empty(); ++i) std::this_thread::sleep_for(5ms);
  *link.cut = true;
  for (int i = 0; i < 200 && coordinator.pool->counters().requeued == 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(coordinator.pool->counters().requeued == 1);
  {
    const std::lock_guard lock(worker.script->mutex);
    worker.script->release = true;  // its verification ends while the coordinator is away
    worker.script->changed.notify_all();
  }
  std::this_thread::sleep_for(100ms);
  *link.cut = false;
  const ca::PoolResult result = wait_for_result(held);
  CHECK(result.outcome == ca::PoolOutcome::evaluated);
  const ca::RemoteWorkerCounters counters = worker.worker->counters();
  CHECK(counters.registrations == 2);
  CHECK(counters.failed_calls > 0);
  CHECK(worker.worker->worker_id() != first_id);
  CHECK(coordinator.pool->counters().evaluated == 1);
}

TEST_CASE("a remote worker's results are cached under its environment, and answer only while it is registered") {
  Coordinator coordinator;
  const auto evaluate_on = [&](const std::string& worker, const std::string& task) {
    const auto ticket = coordinator.pool->submit(coordinator.request(task));
    const std::vector<ca::WorkerLease> leases = coordinator.pool->lease(worker, 2, 1s);
    REQUIRE(leases.size() == 1);
    CHECK(leases[0].id == ticket.id);
    CHECK(coordinator.pool->complete(worker, leases[0].lease, correct_result()));
    CHECK_FALSE(wait_for_result(ticket).cached);
  };
  const auto from_cache = [&](const std::string& task) {
    const auto ticket = coordinator.pool->submit(coordinator.request(task));
    if (ticket.result.wait_for(0s) == std::future_status::ready) return ticket.result.get().cached;
    CHECK(coordinator.pool->cancel(ticket.id));  // queued for a worker: not from the cache
    return false;
  };

  const std::string a100 = coordinator.pool->register_worker({"a100", 2, {}, "cuda A100 torch 2.5"}).worker;
  evaluate_on(a100, "relu");
  CHECK(from_cache("relu"));
  // Another worker of the same environment shares it.
  const std::string twin = coordinator.pool->register_worker({"a100-twin", 2, {}, "cuda A100 torch 2.5"}).worker;
  CHECK(coordinator.pool->deregister_worker(a100));
  CHECK(from_cache("relu"));
  // With only a worker of another GPU, the request is evaluated again there.
  CHECK(coordinator.pool->deregister_worker(twin));
  const std::string h100 = coordinator.pool->register_worker({"h100", 2, {}, "cuda H100 torch 2.5"}).worker;
  CHECK_FALSE(from_cache("relu"));
  evaluate_on(h100, "relu");
  CHECK(from_cache("relu"));
  // A worker that does not say its environment: its results are passed on, never cached,
  // and the others' do not answer for it.
  CHECK(coordinator.pool->deregister_worker(h100));
  const std::string unsaid = coordinator.pool->register_worker({"unsaid", 2, {}, ""}).worker;
  CHECK_FALSE(from_cache("relu"));
  evaluate_on(unsaid, "gelu");
  CHECK_FALSE(from_cache("gelu"));
  // The A100's result answers again once a worker of its environment is back.
  (void)coordinator.pool->register_worker({"a100-again", 2, {}, "cuda A100 torch 2.5"});
  CHECK(from_cache("relu"));
}

TEST_CASE(
    "a remote worker whose every result is an infrastructure error is quarantined, and others evaluate its work") {
  std::mutex told_mutex;
  std::vector<std::string> told;
  Coordinator coordinator(5s, [&](ca::EvaluationPoolOptions& options) {
    options.quarantine_after = 3;
    options.on_quarantine = [&](const std::string&, const ca::WorkerRegistration& registration,
                                const std::string& why) {
      const std::lock_guard lock(told_mutex);
      told.push_back(registration.name + ": " + why);
    };
  });
  const std::string broken = coordinator.pool->register_worker({"broken", 4, {}, "cuda"}).worker;
  const std::string healthy = coordinator.pool->register_worker({"healthy", 4, {}, "cuda"}).worker;
  std::vector<ca::EvaluationPool::Ticket> tickets;
  for (int i = 0; i < 4; ++i)
    tickets.push_back(coordinator.pool->submit(coordinator.request("relu", std::to_string(i))));
  const std::vector<ca::WorkerLease> held = coordinator.pool->lease(broken, 4, 1s);
  REQUIRE(held.size() == 4);

  // A request the broken worker fails goes to another worker, never back to it.
  CHECK(coordinator.pool->complete(broken, held[0].lease, broken_gpu_result()));
  CHECK(coordinator.pool->stage(tickets[0].id) == ca::PoolStage::queued);
  CHECK(coordinator.pool->lease(broken, 4, 20ms).empty());
  CHECK(coordinator.pool->complete(broken, held[1].lease, broken_gpu_result()));
  CHECK(coordinator.pool->remote_workers().at(broken).quarantined.empty());
  CHECK(coordinator.pool->complete(broken, held[2].lease, broken_gpu_result()));

  // Quarantined: what it still held goes back to the queue, and it is told to stop that.
  const ca::RemoteWorkerState state = coordinator.pool->remote_workers().at(broken);
  CHECK(state.quarantined.find("3 infrastructure errors in a row") != std::string::npos);
  CHECK(state.quarantined.find("illegal memory access") != std::string::npos);
  CHECK(state.holds == 0);
  CHECK(coordinator.pool->heartbeat(broken) == std::vector<std::string>{held[3].lease});
  CHECK_FALSE(coordinator.pool->complete(broken, held[3].lease, correct_result()));  // dropped
  tickets.push_back(coordinator.pool->submit(coordinator.request("relu", "after")));
  CHECK(coordinator.pool->lease(broken, 4, 20ms).empty());  // not even work it never failed
  {
    const std::lock_guard lock(told_mutex);
    REQUIRE(told.size() == 1);
    CHECK(told[0].rfind("broken: 3 infrastructure errors in a row", 0) == 0);
  }
  ca::PoolCounters counters = coordinator.pool->counters();
  CHECK(counters.quarantined == 1);
  CHECK(counters.quarantines == 1);
  CHECK(counters.workers == 2);
  CHECK(counters.requeued == 4);

  // The healthy worker evaluates all of it, each request once.
  const std::vector<ca::WorkerLease> again = coordinator.pool->lease(healthy, 8, 1s);
  REQUIRE(again.size() == 5);
  for (const ca::WorkerLease& lease : again) CHECK(coordinator.pool->complete(healthy, lease.lease, correct_result()));
  for (const auto& ticket : tickets) {
    const ca::PoolResult result = wait_for_result(ticket);
    CHECK(result.outcome == ca::PoolOutcome::evaluated);
    CHECK(result.device == "healthy/cpu:0");
  }
  counters = coordinator.pool->counters();
  CHECK(counters.evaluated == 5);
  CHECK(counters.infrastructure_errors == 0);
  CHECK(coordinator.pool->deregister_worker(broken));
  CHECK(coordinator.pool->counters().quarantined == 0);
  CHECK(coordinator.pool->counters().quarantines == 1);
}

TEST_CASE("an evaluated result starts a worker's count of infrastructure errors again") {
  Coordinator coordinator;
  const std::string flaky = coordinator.pool->register_worker({"flaky", 1, {}, "cuda"}).worker;
  int sent = 0;
  const auto send = [&](const ca::PoolResult& result) {
    const auto ticket = coordinator.pool->submit(coordinator.request("relu", std::to_string(++sent)));
    const std::vector<ca::WorkerLease> leases = coordinator.pool->lease(flaky, 1, 1s);
    REQUIRE(leases.size() == 1);
    CHECK(coordinator.pool->complete(flaky, leases[0].lease, result));
    return wait_for_result(ticket).outcome;
  };
  // No other worker could take it: the error is the request's result at once.
  CHECK(send(broken_gpu_result()) == ca::PoolOutcome::infrastructure_error);
  CHECK(send(broken_gpu_result()) == ca::PoolOutcome::infrastructure_error);
  CHECK(send(correct_result()) == ca::PoolOutcome::evaluated);
  CHECK(send(broken_gpu_result()) == ca::PoolOutcome::infrastructure_error);
  CHECK(send(broken_gpu_result()) == ca::PoolOutcome::infrastructure_error);
  CHECK(coordinator.pool->remote_workers().at(flaky).quarantined.empty());
  CHECK(send(broken_gpu_result()) == ca::PoolOutcome::infrastructure_error);
  CHECK_FALSE(coordinator.pool->remote_workers().at(flaky).quarantined.empty());
}

TEST_CASE("a request that every worker fails ends as an infrastructure error after worker_attempts workers") {
  Coordinator coordinator(5s, [](ca::EvaluationPoolOptions& options) {
    options.quarantine_after = 0;  // never: the workers stay, the request must still end
    options.worker_attempts = 3;
  });
  std::vector<std::string> workers;
  for (int i = 0; i < 4; ++i)
    workers.push_back(coordinator.pool->register_worker({"node" + std::to_string(i), 1, {}, "cuda"}).worker);
  const auto ticket = coordinator.pool->submit(coordinator.request("relu"));
  for (int i = 0; i < 3; ++i) {
    const std::vector<ca::WorkerLease> leases = coordinator.pool->lease(workers[i], 1, 1s);
    REQUIRE(leases.size() == 1);
    CHECK(leases[0].id == ticket.id);
    CHECK(coordinator.pool->complete(workers[i], leases[0].lease, broken_gpu_result()));
  }
  const ca::PoolResult result = wait_for_result(ticket);
  CHECK(result.outcome == ca::PoolOutcome::infrastructure_error);
  CHECK(result.message.find("infrastructure errors on 3 remote workers") != std::string::npos);
  CHECK(result.message.find("illegal memory access") != std::string::npos);
  CHECK(coordinator.pool->lease(workers[3], 1, 20ms).empty());
  const ca::PoolCounters counters = coordinator.pool->counters();
  CHECK(counters.infrastructure_errors == 1);
  CHECK(counters.requeued == 2);
  CHECK(counters.quarantines == 0);
}
