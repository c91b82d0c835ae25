// SPDX-License-Identifier: Apache-2.0
// The evaluation pool's scheduling, with a scripted staged evaluator whose behaviour each
// task's name picks: slots in parallel, timing alone on its device, priorities, deadlines,
// cancellation, back-pressure, the result cache, infrastructure errors and the slot
// evaluator replaced after one; then the trusted evaluator itself on CPU slots.
#include "catch.hpp"

#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/service/evaluation_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "service/scripted_evaluator.hpp"
#include "verify/verify_support.hpp"

namespace ca = cuda_agent;
using namespace std::chrono_literals;
using cuda_agent::testing::Script;
using cuda_agent::testing::ScriptedEvaluator;

namespace {

struct Fixture {
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-pool-test-" + ca::detail::random_hex(4));

  Fixture() { std::filesystem::create_directories(root); }
  ~Fixture() {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }

  /// A candidate directory whose model_new.py says `text`.
  std::filesystem::path candidate(const std::string& text) {
    const std::filesystem::path directory = root / ("candidate-" + ca::detail::random_hex(4));
    std::filesystem::create_directories(directory / "kernels");
    std::ofstream(directory / "model_new.py") << "# " << text << "\n";
    return directory;
  }

  ca::EvaluationRequest request(const std::string& task_name, int priority = 0) {
    ca::EvaluationRequest request;
    request.task.name = task_name;
    request.task.reference_source = "# " + task_name + "\n";
    request.candidate_directory = candidate(task_name + "-" + ca::detail::random_hex(4));
    request.priority = priority;
    return request;
  }

  std::unique_ptr<ca::EvaluationPool> pool(ca::EvaluationPoolOptions options) {
    options.work_directory = root / "pool";
    auto shared = script;
    return std::make_unique<ca::EvaluationPool>(std::move(options), ScriptedEvaluator{script},
                                                [shared](const ca::PoolSlot&) {
                                                  const std::lock_guard lock(shared->mutex);
                                                  ++shared->evaluators_made;
                                                  shared->changed.notify_all();
                                                  return ca::AnyStagedEvaluator(ScriptedEvaluator{shared});
                                                });
  }

  void release() {
    const std::lock_guard lock(script->mutex);
    script->release = true;
    script->changed.notify_all();
  }

  /// Waits until `predicate` holds of the script (at most 10 s).
  template <class Predicate>
  bool eventually(Predicate predicate) {
    std::unique_lock lock(script->mutex);
    return script->changed.wait_for(lock, 10s, [&] { return predicate(*script); }) || predicate(*script);
  }
};

ca::PoolResult wait(const ca::EvaluationPool::Ticket& ticket) {
  REQUIRE(ticket.result.wait_for(30s) == std::future_status::ready);
  return ticket.result.get();
}

}  // namespace

TEST_CASE("the pool verifies on its slots side by side and times each candidate alone on its device") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}, {"cpu", 0}, {"cpu", 0}, {"cpu", 1}};
  options.build_workers = 2;
  auto pool = fixture.pool(options);
  std::vector<ca::EvaluationPool::Ticket> tickets;
  for (int i = 0; i < 12; ++i) tickets.push_back(pool->submit(fixture.request("busy" + std::to_string(i))));
  for (const auto& ticket : tickets) {
    const ca::PoolResult result = wait(ticket);
    CHECK(result.outcome == ca::PoolOutcome::evaluated);
    REQUIRE(result.evaluation);
    CHECK(result.evaluation->correct());
    CHECK(result.evaluation->profile);
    CHECK((result.device == "cpu:0" || result.device == "cpu:1"));
  }
  CHECK(fixture.script->most_verifying >= 2);
  const ca::PoolCounters counters = pool->counters();
  CHECK(counters.evaluated == 12);
  CHECK(counters.queued + counters.building + counters.waiting_for_slot + counters.verifying + counters.timing == 0);
  CHECK(counters.busy.at("cpu:0") > 0ms);
}

TEST_CASE("timing waits for the verifications on its device, and new ones wait for it") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}, {"cpu", 0}, {"cpu", 0}};
  auto pool = fixture.pool(options);
  std::vector<ca::EvaluationPool::Ticket> tickets;
  for (int i = 0; i < 9; ++i)
    tickets.push_back(pool->submit(fixture.request(i % 3 == 0 ? "timed" : "busy" + std::to_string(i))));
  for (const auto& ticket : tickets) CHECK(wait(ticket).outcome == ca::PoolOutcome::evaluated);
  CHECK_FALSE(fixture.script->timed_beside_verification);
}

TEST_CASE("requests go by priority, then deadline, then arrival") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}};
  auto pool = fixture.pool(options);
  // The slot is held by the first request while the others queue up behind it.
  const auto first = pool->submit(fixture.request("hold"));
  REQUIRE(fixture.eventually([](const Script& script) { return !script.verified.empty(); }));
  const auto soon = std::chrono::steady_clock::now() + 60s;
  auto late = fixture.request("late");
  auto early = fixture.request("early");
  early.deadline = soon;
  late.deadline = soon + 10s;
  const std::vector<ca::EvaluationPool::Ticket> tickets{pool->submit(fixture.request("plain")), pool->submit(late),
                                                        pool->submit(early),
                                                        pool->submit(fixture.request("urgent", 5))};
  REQUIRE(fixture.eventually([](const Script& script) {
    return script.prepared.count("urgent") && script.prepared.count("plain") && script.prepared.count("late") &&
           script.prepared.count("early");
  }));
  std::this_thread::sleep_for(50ms);  // every prepared one reaches the slot's queue
  fixture.release();
  wait(first);
  for (const auto& ticket : tickets) wait(ticket);
  const std::vector<std::string> expected{"hold", "urgent", "early", "late", "plain"};
  CHECK(fixture.script->verified == expected);
}

TEST_CASE("a cancelled request stops where it is, and one past its deadline is not started") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}};
  std::vector<ca::PoolEvent> events;
  std::mutex events_mutex;
  options.on_event = [&](const ca::PoolEvent& event) {
    const std::lock_guard lock(events_mutex);
    events.push_back(event);
  };
  auto pool = fixture.pool(options);
  const auto held = pool->submit(fixture.request("hold"));
  REQUIRE(fixture.eventually([](const Script& script) { return !script.verified.empty(); }));
  const auto waiting = pool->submit(fixture.request("waiting"));
  auto expiring = fixture.request("expiring");
  expiring.deadline = std::chrono::steady_clock::now() + 10ms;
  const auto expired = pool->submit(expiring);
  REQUIRE(fixture.eventually([](const Script& script) { return script.prepared.count("waiting") == 1; }));
  for (int i = 0; i < 200 && pool->stage(waiting.id) != ca::PoolStage::waiting_for_slot; ++i)
    std::this_thread::sleep_for(10ms);
  CHECK(pool->stage(waiting.id) == ca::PoolStage::waiting_for_slot);
  CHECK(pool->cancel(waiting.id));
  CHECK(wait(waiting).outcome == ca::PoolOutcome::cancelled);
  CHECK_FALSE(pool->cancel(waiting.id));
  CHECK_FALSE(pool->cancel("no-such-request"));
  // The running one finishes its stage, then stops: cancelled, never timed.
  CHECK(pool->cancel(held.id));
  std::this_thread::sleep_for(30ms);
  fixture.release();
  const ca::PoolResult cancelled = wait(held);
  CHECK(cancelled.outcome == ca::PoolOutcome::cancelled);
  REQUIRE(cancelled.evaluation);
  CHECK_FALSE(cancelled.evaluation->profile);
  const ca::PoolResult late = wait(expired);
  CHECK(late.outcome == ca::PoolOutcome::expired);
  CHECK(late.message.find("deadline") != std::string::npos);
  CHECK(std::count(fixture.script->verified.begin(), fixture.script->verified.end(), "expiring") == 0);
  CHECK(std::count(fixture.script->verified.begin(), fixture.script->verified.end(), "waiting") == 0);
  const ca::PoolCounters counters = pool->counters();
  CHECK(counters.cancelled == 2);
  CHECK(counters.expired == 1);
  // Events arrive in the order they happened, and every request's run from queued to finished.
  pool.reset();
  const std::lock_guard lock(events_mutex);
  for (std::size_t i = 0; i < events.size(); ++i) CHECK(events[i].sequence == i + 1);
  for (const auto& ticket : {held, waiting, expired}) {
    std::vector<ca::PoolStage> stages;
    for (const auto& event : events)
      if (event.id == ticket.id) stages.push_back(event.stage);
    REQUIRE(stages.size() >= 2);
    CHECK(stages.front() == ca::PoolStage::queued);
    CHECK(stages.back() == ca::PoolStage::finished);
  }
}

TEST_CASE("a full pool says so and queues nothing, and a closing one takes no requests") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}};
  options.max_pending = 2;
  auto pool = fixture.pool(options);
  const auto held = pool->submit(fixture.request("hold"));
  const auto second = pool->submit(fixture.request("second"));
  try {
    (void)pool->submit(fixture.request("third"));
    FAIL("a third request was accepted");
  } catch (const ca::PoolFull& full) {
    CHECK(std::string(full.what()).find("max_pending") != std::string::npos);
  }
  fixture.release();
  wait(held);
  wait(second);
  CHECK(fixture.script->prepared.count("third") == 0);
  CHECK(wait(pool->submit(fixture.request("third"))).outcome == ca::PoolOutcome::evaluated);
  pool->close();
  CHECK_THROWS_AS((void)pool->submit(fixture.request("fourth")), ca::PoolFull);
}

TEST_CASE("a repeated request is answered from the cache, a changed file or policy is not") {
  Fixture fixture;
  auto pool = fixture.pool({});
  ca::EvaluationRequest request = fixture.request("cached");
  const ca::PoolResult first = wait(pool->submit(request));
  CHECK_FALSE(first.cached);
  const ca::PoolResult again = wait(pool->submit(request));
  CHECK(again.cached);
  CHECK(again.id != first.id);
  REQUIRE(again.evaluation);
  CHECK(again.evaluation->correct());
  CHECK(fixture.script->prepared["cached"] == 1);
  request.policy = {{"tolerance", "strict"}};
  CHECK_FALSE(wait(pool->submit(request)).cached);
  std::ofstream(request.candidate_directory / "model_new.py") << "# changed\n";
  CHECK_FALSE(wait(pool->submit(request)).cached);
  CHECK(fixture.script->prepared["cached"] == 3);
  CHECK(pool->counters().cache_hits == 1);
}

TEST_CASE("a request's policy reaches the evaluators with its candidate, and one none could apply is refused") {
  Fixture fixture;
  auto pool = fixture.pool({});
  ca::EvaluationRequest request = fixture.request("plain");
  request.policy = {{"tolerance", "strict"},
                    {"libraries", {{"cudnn", false}}},
                    {"timing_budget", {{"seconds", 0.25}, {"max_rounds", 20}}},
                    {"reward", "speedup"}};
  const ca::PoolResult result = wait(pool->submit(request));
  REQUIRE(result.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(result.evaluation);
  // Verified and timed under it (the keys the host keeps to itself, like "reward", stay here;
  // the library policy's fields left out are the library's defaults).
  nlohmann::json expected = request.policy;
  expected.erase("reward");
  expected["libraries"] = ca::LibraryPolicy{};
  expected["libraries"]["cudnn"] = false;
  CHECK(result.evaluation->verification->details["policy"] == expected);
  REQUIRE(result.evaluation->profile);
  CHECK(result.evaluation->profile->details["policy"] == expected);

  for (const nlohmann::json& policy :
       {nlohmann::json{{"tolerance", "loose"}}, nlohmann::json{{"timing_budget", {{"seconds", -1}}}},
        nlohmann::json{{"libraries", {{"cublas", "yes"}}}}}) {
    INFO(policy.dump());
    request.policy = policy;
    CHECK_THROWS_AS((void)pool->submit(request), std::invalid_argument);
  }
  CHECK(fixture.script->prepared["plain"] == 1);
}

TEST_CASE("the files are taken when the request is accepted") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}};
  auto pool = fixture.pool(options);
  const auto held = pool->submit(fixture.request("hold"));
  ca::EvaluationRequest request = fixture.request("snapshot");
  const auto ticket = pool->submit(request);
  std::filesystem::remove_all(request.candidate_directory);  // the agent moved on
  fixture.release();
  wait(held);
  const ca::PoolResult result = wait(ticket);
  CHECK(result.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(result.evaluation);
  CHECK(result.evaluation->correct());
}

TEST_CASE("failures of the evaluation are infrastructure errors, and the slot gets a new evaluator") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}};
  auto pool = fixture.pool(options);
  CHECK(fixture.script->evaluators_made == 1);
  const ca::PoolResult crashed = wait(pool->submit(fixture.request("crash")));
  CHECK(crashed.outcome == ca::PoolOutcome::infrastructure_error);
  CHECK(crashed.message.find("the worker process was lost") != std::string::npos);
  CHECK(crashed.message.find("not the candidate's fault") != std::string::npos);
  // The result comes first; the slot then replaces its evaluator before it takes more work.
  CHECK(fixture.eventually([](const Script& script) { return script.evaluators_made == 2; }));
  const ca::PoolResult harness = wait(pool->submit(fixture.request("harness")));
  CHECK(harness.outcome == ca::PoolOutcome::infrastructure_error);
  CHECK(harness.message == "the harness crashed");
  CHECK(fixture.eventually([](const Script& script) { return script.evaluators_made == 3; }));
  // The candidate's own verdicts stay verdicts; nothing infrastructural is cached.
  const ca::PoolResult wrong = wait(pool->submit(fixture.request("wrong")));
  CHECK(wrong.outcome == ca::PoolOutcome::evaluated);
  CHECK(wrong.evaluation->rejection()->reason == ca::RejectionReason::value_mismatch);
  const ca::PoolResult refused = wait(pool->submit(fixture.request("refused")));
  CHECK(refused.outcome == ca::PoolOutcome::evaluated);
  CHECK(refused.device.empty());  // decided before any device
  CHECK(wait(pool->submit(fixture.request("ok"))).outcome == ca::PoolOutcome::evaluated);
  const ca::PoolCounters counters = pool->counters();
  CHECK(counters.infrastructure_errors == 2);
  CHECK(counters.evaluated == 3);
}

TEST_CASE("closing the pool lets accepted requests finish, and dropping it cancels what waits") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}};
  auto pool = fixture.pool(options);
  std::vector<ca::EvaluationPool::Ticket> tickets;
  for (int i = 0; i < 4; ++i) tickets.push_back(pool->submit(fixture.request("slow")));
  pool->close();
  for (const auto& ticket : tickets) {
    REQUIRE(ticket.result.wait_for(0s) == std::future_status::ready);
    CHECK(ticket.result.get().outcome == ca::PoolOutcome::evaluated);
  }
  auto dropped = fixture.pool(options);
  const auto held = dropped->submit(fixture.request("hold"));
  const auto queued = dropped->submit(fixture.request("queued"));
  REQUIRE(fixture.eventually(
      [](const Script& script) { return std::count(script.verified.begin(), script.verified.end(), "hold") == 1; }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    fixture.release();
  });
  dropped.reset();
  releaser.join();
  CHECK(wait(queued).outcome == ca::PoolOutcome::cancelled);
  CHECK(wait(held).outcome == ca::PoolOutcome::cancelled);
}

namespace {

/// Candidates of the adversarial suite (with the shared CPU toolbox as their kernels) and
/// trusted evaluators of the real harness on the CPU, in a directory of their own.
struct TrustedOnCpu {
  std::filesystem::path adversarial = std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "adversarial";
  std::filesystem::path work =
      std::filesystem::temp_directory_path() / ("cuda-agent-pool-trusted-" + ca::detail::random_hex(4));
  ca::Task relu;
  ca::VerificationPolicy policy;

  TrustedOnCpu() {
    std::filesystem::create_directories(work);
    relu = ca::testing::task_from_file(adversarial / "tasks" / "cpu" / "relu.py");
  }
  ~TrustedOnCpu() {
    std::error_code ignored;
    std::filesystem::remove_all(work, ignored);
  }

  [[nodiscard]] ca::EvaluationRequest request(const std::string& name) const {
    const std::filesystem::path directory = work / "candidates" / name;
    std::filesystem::create_directories(directory / "kernels");
    std::filesystem::copy_file(adversarial / "candidates" / name / "model_new.py", directory / "model_new.py",
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::copy_file(adversarial / "kernels" / "cpu" / "toolbox.cpp", directory / "kernels" / "toolbox.cpp",
                               std::filesystem::copy_options::overwrite_existing);
    ca::EvaluationRequest request;
    request.task = relu;
    request.candidate_directory = directory;
    return request;
  }

  [[nodiscard]] ca::AnyStagedEvaluator evaluator() const {
    ca::TrustedEvaluatorOptions options;
    options.work_directory = work / "evaluations";
    return ca::AnyStagedEvaluator(ca::TrustedEvaluator<ca::HarnessVerifier, ca::ProcessSandbox>(
        ca::testing::test_compiler("cpu", work), ca::HarnessVerifier(ca::testing::harness_options("cpu"), policy),
        std::nullopt, options));
  }

  [[nodiscard]] std::unique_ptr<ca::EvaluationPool> pool(std::size_t slots) const {
    ca::EvaluationPoolOptions options;
    options.slots.assign(slots, ca::PoolSlot{"cpu", 0});
    options.work_directory = work / "pool";
    return std::make_unique<ca::EvaluationPool>(options, evaluator(),
                                                [this](const ca::PoolSlot&) { return evaluator(); });
  }
};

}  // namespace

TEST_CASE("the trusted evaluator through a pool of CPU slots: verdicts as cuda-agent eval gives them", "[python]") {
  TrustedOnCpu trusted;
  auto pool = trusted.pool(2);
  const ca::EvaluationRequest correct = trusted.request("correct_relu");
  const auto correct_ticket = pool->submit(correct);
  const auto wrong_ticket = pool->submit(trusted.request("missing_last_element"));
  REQUIRE(correct_ticket.result.wait_for(600s) == std::future_status::ready);
  REQUIRE(wrong_ticket.result.wait_for(600s) == std::future_status::ready);
  const ca::PoolResult accepted = correct_ticket.result.get();
  const ca::PoolResult rejected = wrong_ticket.result.get();
  INFO(accepted.message);
  REQUIRE(accepted.outcome == ca::PoolOutcome::evaluated);
  CHECK(accepted.evaluation->correct());
  REQUIRE(rejected.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(rejected.evaluation->rejection());
  CHECK(rejected.evaluation->rejection()->reason != ca::RejectionReason::harness_error);
  CHECK_FALSE(rejected.evaluation->correct());
  // The same request again costs nothing.
  CHECK(pool->submit(correct).result.get().cached);
}

TEST_CASE("a candidate that hangs its slot is stopped as a timeout, and the slot goes on with the next", "[python]") {
  TrustedOnCpu trusted;
  trusted.policy.timeout = 8s;
  auto pool = trusted.pool(1);
  const auto started = std::chrono::steady_clock::now();
  const auto hung = pool->submit(trusted.request("endless_loop"));
  const auto next = pool->submit(trusted.request("correct_relu"));
  REQUIRE(hung.result.wait_for(600s) == std::future_status::ready);
  const ca::PoolResult stopped = hung.result.get();
  INFO(stopped.message);
  // The candidate's own verdict, not an infrastructure error: the hang is its doing.
  REQUIRE(stopped.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(stopped.evaluation->rejection());
  CHECK(stopped.evaluation->rejection()->reason == ca::RejectionReason::timeout);
  REQUIRE(next.result.wait_for(600s) == std::future_status::ready);
  const ca::PoolResult after = next.result.get();
  INFO(after.message);
  REQUIRE(after.outcome == ca::PoolOutcome::evaluated);
  CHECK(after.evaluation->correct());
  CHECK(std::chrono::steady_clock::now() - started < 300s);
}

TEST_CASE("a verification out of device memory beside other work goes again alone, and only then is a verdict") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cuda", 0}, {"cuda", 0}};
  auto pool = fixture.pool(options);
  const auto held = pool->submit(fixture.request("hold"));
  REQUIRE(fixture.eventually([](const Script& script) { return !script.verified.empty(); }));
  const auto crowded = pool->submit(fixture.request("oom"));
  // It ran beside the held one and failed; alone, it waits for the device.
  REQUIRE(fixture.eventually(
      [](const Script& script) { return std::count(script.verified.begin(), script.verified.end(), "oom") == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(crowded.result.wait_for(0s) == std::future_status::timeout);
  fixture.release();
  wait(held);
  const ca::PoolResult alone = wait(crowded);
  CHECK(alone.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(alone.evaluation);
  CHECK(alone.evaluation->correct());
  // One that fails alone too has its verdict.
  const ca::PoolResult verdict = wait(pool->submit(fixture.request("oom_always")));
  CHECK(verdict.outcome == ca::PoolOutcome::evaluated);
  REQUIRE(verdict.evaluation->rejection());
  CHECK(verdict.evaluation->rejection()->reason == ca::RejectionReason::runtime_error);
  CHECK(pool->counters().retried_alone == 2);
  CHECK(std::count(fixture.script->verified.begin(), fixture.script->verified.end(), "oom") == 2);
  // On a device of its own a slot has nobody to blame: the first failure is the verdict.
  Fixture single;
  ca::EvaluationPoolOptions one_slot;
  one_slot.slots = {{"cuda", 0}};
  auto lone_pool = single.pool(one_slot);
  CHECK_FALSE(wait(lone_pool->submit(single.request("oom_always"))).evaluation->correct());
  CHECK(lone_pool->counters().retried_alone == 0);
}

TEST_CASE("with a memory budget, a task's first verification runs alone, later ones share the device while they fit") {
  Fixture fixture;
  ca::EvaluationPoolOptions options;
  options.slots = {{"cpu", 0}, {"cpu", 0}, {"cpu", 0}};
  options.device_memory_bytes = 10ULL << 30U;
  auto pool = fixture.pool(options);
  const auto most_verifying_of = [&](const std::string& task, int count) {
    {
      const std::lock_guard lock(fixture.script->mutex);
      fixture.script->most_verifying = 0;
    }
    std::vector<ca::EvaluationPool::Ticket> tickets;
    for (int i = 0; i < count; ++i) tickets.push_back(pool->submit(fixture.request(task)));
    for (const auto& ticket : tickets) CHECK(wait(ticket).outcome == ca::PoolOutcome::evaluated);
    const std::lock_guard lock(fixture.script->mutex);
    return fixture.script->most_verifying;
  };
  // Unknown: alone, even beside nothing else, while its reference's memory is measured.
  CHECK(most_verifying_of("mem2", 2) == 1);
  CHECK(pool->counters().admitted_alone >= 1);
  // Known: 2 GiB held by the reference, 4 GiB estimated with the candidate's; two fit in 10.
  CHECK(most_verifying_of("mem2", 6) == 2);
  // 6 GiB held, 12 estimated: fits beside nothing, so each one has the device to itself.
  const std::size_t alone_before = pool->counters().admitted_alone;
  CHECK(most_verifying_of("mem6", 3) == 1);
  CHECK(pool->counters().admitted_alone == alone_before + 3);
  // Without a budget the same tasks share the device as the slots allow.
  ca::EvaluationPoolOptions unlimited = options;
  unlimited.device_memory_bytes = 0;
  pool = fixture.pool(unlimited);
  CHECK(most_verifying_of("mem6", 3) >= 2);
  CHECK(pool->counters().admitted_alone == 0);
}
