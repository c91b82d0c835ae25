// SPDX-License-Identifier: Apache-2.0
// The evaluation service without its HTTP: requests checked against their schema, results
// and progress, client limits, cancellation, the journal that survives the service, drain,
// remote workers' registrations and quarantine as JSON, and each request's own policy (with
// the scripted evaluator, then the trusted one on a CPU slot, [python]).
#include "catch.hpp"

#include <cuda_agent/evaluate/trusted_evaluator.hpp>
#include <cuda_agent/profile/harness_profiler.hpp>
#include <cuda_agent/profile/worker_timing_launcher.hpp>
#include <cuda_agent/resources.hpp>
#include <cuda_agent/service/evaluation_service.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "profile/test_support.hpp"
#include "service/scripted_evaluator.hpp"
#include "verify/verify_support.hpp"

namespace ca = cuda_agent;
using namespace std::chrono_literals;
using cuda_agent::testing::Script;
using cuda_agent::testing::ScriptedEvaluator;

namespace {

struct ServiceFixture {
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-service-test-" + ca::detail::random_hex(4));

  ServiceFixture() { std::filesystem::create_directories(root); }
  ~ServiceFixture() {
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }

  ca::EvaluationServiceOptions options() const {
    ca::EvaluationServiceOptions options;
    options.pool.slots = {{"cpu", 0}};
    options.pool.work_directory = root / "pool";
    options.state_directory = root / "state";
    return options;
  }

  std::unique_ptr<ca::EvaluationService> service(ca::EvaluationServiceOptions options) {
    auto shared = script;
    return std::make_unique<ca::EvaluationService>(
        std::move(options), ScriptedEvaluator{script},
        [shared](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(ScriptedEvaluator{shared}); });
  }
  std::unique_ptr<ca::EvaluationService> service() { return service(options()); }

  void release() {
    const std::lock_guard lock(script->mutex);
    script->release = true;
    script->changed.notify_all();
  }
};

/// A request for the scripted evaluator: the task's name picks its behaviour.
nlohmann::json request(const std::string& task, const std::string& marker = "") {
  return {{"task", {{"name", task}, {"source", "# " + task + "\n"}}},
          {"candidate",
           {{"files",
             {{"model_new.py", "# " + task + " " + marker + ca::detail::random_hex(4) + "\n"},
              {"kernels/kernel.cpp", "// kernel\n"}}}}}};
}

std::string submit_one(ca::EvaluationService& service, const nlohmann::json& body,
                       const std::string& client = "local") {
  const nlohmann::json answer = service.submit(body, client);
  REQUIRE(answer["evaluations"].size() == 1);
  return answer["evaluations"][0]["id"];
}

nlohmann::json finished(const ca::EvaluationService& service, const std::string& id) {
  const nlohmann::json status = service.wait(id, 30s);
  REQUIRE(status["stage"] == "finished");
  return status;
}

/// The ServiceError `call` throws (fails the test when it throws none).
template <class Call>
ca::ServiceError refusal(Call call) {
  try {
    call();
  } catch (const ca::ServiceError& error) {
    return error;
  }
  FAIL("no ServiceError was thrown");
  return ca::ServiceError(0, "", "");
}

}  // namespace

TEST_CASE("the service's schemas use only what its validator implements") {
  for (const char* name : {"service/evaluation_request.schema.json", "service/evaluation_status.schema.json"}) {
    INFO(name);
    const auto text = ca::embedded_resource(name);
    REQUIRE(text);
    const nlohmann::json schema = nlohmann::json::parse(*text);
    CHECK(ca::detail::unsupported_schema_keywords(schema).empty());
  }
}

TEST_CASE("a request that does not fit its schema is refused with the field named, and nothing runs") {
  ServiceFixture fixture;
  auto service = fixture.service();
  nlohmann::json body = request("plain");
  body["priority"] = "high";
  ca::ServiceError error = refusal([&] { service->submit(body); });
  CHECK(error.status() == 400);
  CHECK(error.code() == "schema_violation");
  CHECK(std::string(error.what()).find("priority") != std::string::npos);

  body = request("plain");
  body["colour"] = "blue";
  error = refusal([&] { service->submit(body); });
  CHECK(error.status() == 400);
  CHECK(std::string(error.what()).find("colour") != std::string::npos);

  body = request("plain");
  body.erase("task");
  error = refusal([&] { service->submit(body); });
  CHECK(std::string(error.what()).find("task") != std::string::npos);

  error = refusal([&] { service->submit(nlohmann::json::array({1, 2})); });
  CHECK(error.status() == 400);

  // Files outside the candidate contract, host paths, and a policy the server does not use.
  body = request("plain");
  body["candidate"]["files"]["../../etc/passwd"] = "x";
  error = refusal([&] { service->submit(body); });
  CHECK(error.code() == "invalid_candidate");
  CHECK(std::string(error.what()).find("../../etc/passwd") != std::string::npos);
  body = request("plain");
  body["candidate"] = {{"directory", "/etc"}};
  CHECK(refusal([&] { service->submit(body); }).code() == "host_paths_refused");
  body = request("plain");
  body["policy"] = {{"device", "cuda"}};
  error = refusal([&] { service->submit(body); });
  CHECK(error.code() == "unsupported_policy");
  CHECK(std::string(error.what()).find("\"cpu\"") != std::string::npos);

  // One bad request in a batch refuses the whole batch, and says which.
  nlohmann::json batch = {{"requests", {request("plain"), request("plain")}}};
  batch["requests"][1]["deadline_s"] = -1;
  error = refusal([&] { service->submit(batch); });
  CHECK(std::string(error.what()).find("requests[1]") != std::string::npos);
  CHECK(fixture.script->prepared.empty());
  CHECK(service->health()["unfinished"] == 0);
}

TEST_CASE("size limits: a batch and a candidate's files have a most") {
  ServiceFixture fixture;
  ca::EvaluationServiceOptions options = fixture.options();
  options.max_batch = 2;
  options.max_candidate_bytes = 1000;
  auto service = fixture.service(options);
  const nlohmann::json batch = {{"requests", {request("plain"), request("plain"), request("plain")}}};
  ca::ServiceError error = refusal([&] { service->submit(batch); });
  CHECK(error.status() == 413);
  CHECK(error.code() == "batch_too_large");
  nlohmann::json big = request("plain");
  big["candidate"]["files"]["kernels/big.cpp"] = std::string(2000, 'x');
  error = refusal([&] { service->submit(big); });
  CHECK(error.status() == 413);
  CHECK(error.code() == "candidate_too_large");
}

TEST_CASE("an evaluation runs to its reward, and its progress reads from queued to finished") {
  ServiceFixture fixture;
  auto service = fixture.service();
  const nlohmann::json answer = service->submit({{"requests", {request("plain"), request("wrong")}}}, "trainer");
  REQUIRE(answer["evaluations"].size() == 2);
  const std::string good = answer["evaluations"][0]["id"];
  const std::string bad = answer["evaluations"][1]["id"];
  CHECK(good != bad);
  const nlohmann::json accepted = finished(*service, good);
  CHECK(accepted["outcome"] == "evaluated");
  CHECK(accepted["reward"]["value"] == 1);
  CHECK(accepted["client"] == "trainer");
  CHECK(accepted["task"] == "plain");
  const nlohmann::json rejected = finished(*service, bad);
  CHECK(rejected["outcome"] == "evaluated");
  CHECK(rejected["reward"]["value"] == -1);
  CHECK(rejected["rejection"]["reason"] == "value_mismatch");

  // Every status fits the shipped schema of statuses.
  const nlohmann::json status_schema =
      nlohmann::json::parse(*ca::embedded_resource("service/evaluation_status.schema.json"));
  CHECK(ca::detail::schema_violations(status_schema, accepted).empty());
  CHECK(ca::detail::schema_violations(status_schema, rejected).empty());

  const ca::EvaluationService::Progress progress = service->events(good, 0, 0ms);
  CHECK(progress.finished);
  REQUIRE(progress.events.size() >= 3);
  CHECK(progress.events.front()["stage"] == "queued");
  CHECK(progress.events.back()["stage"] == "finished");
  CHECK(progress.events.back()["reward"] == 1);

  CHECK(refusal([&] { (void)service->status("ev-nonexistent"); }).status() == 404);
  CHECK(refusal([&] { service->cancel(good); }).status() == 409);
  const std::string metrics = service->metrics();
  CHECK(metrics.find("cuda_agent_evaluations_accepted_total 2") != std::string::npos);
  CHECK(metrics.find("cuda_agent_evaluations_finished_total{outcome=\"evaluated\"} 2") != std::string::npos);
  CHECK(metrics.find("# TYPE cuda_agent_device_busy_seconds_total counter") != std::string::npos);
}

TEST_CASE("a request chooses its reward and may verify only, and never evaluates otherwise than it asked") {
  ServiceFixture fixture;
  auto service = fixture.service();
  nlohmann::json verify_only = request("plain", "verify-only");
  verify_only["policy"] = {{"timing", false}};
  nlohmann::json speedup = request("plain", "speedup");
  speedup["policy"] = {{"reward", "speedup"}};
  const nlohmann::json answer = service->submit({{"requests", {verify_only, speedup, request("plain", "own")}}});
  const nlohmann::json untimed = finished(*service, answer["evaluations"][0]["id"].get<std::string>());
  const nlohmann::json by_speedup = finished(*service, answer["evaluations"][1]["id"].get<std::string>());
  const nlohmann::json by_default = finished(*service, answer["evaluations"][2]["id"].get<std::string>());
  // Verified, never timed: the scripted evaluator's profile stage did not run for it.
  CHECK(untimed["outcome"] == "evaluated");
  CHECK(untimed["evaluation"]["verification"]["correct"] == true);
  const auto profile_of = [](const nlohmann::json& status) {
    return status["evaluation"].value("profile", nlohmann::json());
  };
  CHECK(profile_of(untimed).is_null());
  CHECK_FALSE(profile_of(by_default).is_null());
  // The library's speedup reward for the request that chose it, the server's for the others.
  CHECK(by_speedup["reward"]["label"] == "correct_unmeasured");
  CHECK(by_default["reward"]["label"] != "correct_unmeasured");
  CHECK(by_default["reward"]["value"] == 1);

  // The same files verified only and timed are different requests, never each other's cache.
  nlohmann::json timed_again = verify_only;
  timed_again.erase("policy");
  const std::string again = service->submit(timed_again)["evaluations"][0]["id"];
  CHECK_FALSE(profile_of(finished(*service, again)).is_null());

  // Another device, or timing a server does not do, is refused rather than evaluated otherwise.
  nlohmann::json elsewhere = request("plain");
  elsewhere["policy"] = {{"device", "cuda"}, {"reward", "speedup"}};
  CHECK(refusal([&] { service->submit(elsewhere); }).code() == "unsupported_policy");
  ca::EvaluationServiceOptions untimed_options = fixture.options();
  untimed_options.state_directory = fixture.root / "untimed-state";
  untimed_options.policy["timing"] = false;
  service.reset();
  service = fixture.service(untimed_options);
  nlohmann::json timed = request("plain");
  timed["policy"] = {{"timing", true}};
  const ca::ServiceError error = refusal([&] { service->submit(timed); });
  CHECK(error.code() == "unsupported_policy");
  CHECK(std::string(error.what()).find("policy.timing") != std::string::npos);
}

TEST_CASE(
    "a request's tolerance, libraries and timing budget reach the evaluator over the server's own, and its "
    "result says what it used") {
  ServiceFixture fixture;
  auto service = fixture.service();
  nlohmann::json body = request("plain");
  body["policy"] = {{"tolerance", "strict"}, {"libraries", {{"cublas", false}}}, {"timing_budget", {{"seconds", 0.5}}}};
  const nlohmann::json status = finished(*service, submit_one(*service, body));
  REQUIRE(status["outcome"] == "evaluated");
  // The server's policy with the request's choices, field by field.
  nlohmann::json expected = ca::EvaluationServiceOptions{}.policy;
  expected["tolerance"] = "strict";
  expected["libraries"]["cublas"] = false;
  expected["timing_budget"]["seconds"] = 0.5;
  CHECK(status["policy"] == expected);
  // The evaluator took just that, for the verification and for the timing.
  const nlohmann::json taken = status["policy"].get<ca::EvaluationPolicy>();
  CHECK(taken["timing_budget"] == nlohmann::json{{"seconds", 0.5}, {"max_rounds", 400}});
  CHECK(status["evaluation"]["verification"]["details"]["policy"] == taken);
  CHECK(status["evaluation"]["profile"]["details"]["policy"] == taken);
  // A request that chose nothing gets the server's own, and says so.
  const nlohmann::json plain = finished(*service, submit_one(*service, request("plain")));
  CHECK(plain["policy"] == ca::EvaluationServiceOptions{}.policy);
  CHECK(plain["evaluation"]["verification"]["details"]["policy"]["tolerance"] == "default");
  // The policy used is part of every status, as the shipped schema says.
  const nlohmann::json status_schema =
      nlohmann::json::parse(*ca::embedded_resource("service/evaluation_status.schema.json"));
  CHECK(status_schema["properties"].contains("policy"));
  CHECK(ca::detail::schema_violations(status_schema, status).empty());
}

TEST_CASE(
    "a policy that names the server's defaults is the same request as one that names none, and another "
    "tolerance or budget is not") {
  ServiceFixture fixture;
  auto service = fixture.service();
  const nlohmann::json body = request("plain");
  CHECK(finished(*service, submit_one(*service, body))["cached"] == false);
  // Every default named, the seconds as an integer: the same effective policy, one cached result.
  nlohmann::json explicit_defaults = body;
  explicit_defaults["policy"] = {{"tolerance", "default"},
                                 {"timing", true},
                                 {"timing_budget", {{"seconds", 2}, {"max_rounds", 400}}},
                                 {"libraries", {{"cublas", true}, {"derive_from_reference", true}}},
                                 {"reward", "milestone"},
                                 {"device", "cpu"}};
  const nlohmann::json again = service->submit(explicit_defaults)["evaluations"][0];
  CHECK(again["stage"] == "finished");
  CHECK(again["cached"] == true);
  CHECK(again["policy"] == ca::EvaluationServiceOptions{}.policy);
  // What changes a verdict or a timing is another request.
  for (const nlohmann::json& policy :
       {nlohmann::json{{"tolerance", "strict"}}, nlohmann::json{{"timing_budget", {{"max_rounds", 50}}}},
        nlohmann::json{{"libraries", {{"cudnn", false}}}}}) {
    INFO(policy.dump());
    nlohmann::json other = body;
    other["policy"] = policy;
    const nlohmann::json answer = service->submit(other)["evaluations"][0];
    CHECK(answer["stage"] == "queued");
    CHECK(finished(*service, answer["id"])["cached"] == false);
  }
  CHECK(fixture.script->prepared["plain"] == 4);
}

TEST_CASE("a policy no evaluation could follow is refused with its field named, and nothing runs") {
  ServiceFixture fixture;
  auto service = fixture.service();
  const auto refused = [&](const nlohmann::json& policy, const std::string& field, const std::string& code) {
    INFO(policy.dump());
    nlohmann::json body = request("plain");
    body["policy"] = policy;
    const ca::ServiceError error = refusal([&] { service->submit(body); });
    CHECK(error.status() == 400);
    CHECK(error.code() == code);
    INFO(error.what());
    CHECK(std::string(error.what()).find(field) != std::string::npos);
  };
  refused({{"tolerance", "loose"}}, "policy.tolerance", "schema_violation");
  refused({{"tolerance", 0.01}}, "policy.tolerance", "schema_violation");
  refused({{"timing_budget", {{"seconds", 0}}}}, "policy.timing_budget.seconds", "schema_violation");
  refused({{"timing_budget", {{"seconds", 3600}}}}, "policy.timing_budget.seconds", "schema_violation");
  refused({{"timing_budget", {{"max_rounds", 1}}}}, "policy.timing_budget.max_rounds", "schema_violation");
  refused({{"timing_budget", {{"max_rounds", 2.5}}}}, "policy.timing_budget.max_rounds", "schema_violation");
  refused({{"timing_budget", {{"minutes", 1}}}}, "minutes", "schema_violation");
  refused({{"libraries", {{"cublas", "no"}}}}, "policy.libraries.cublas", "schema_violation");
  refused({{"libraries", {{"mkl", false}}}}, "mkl", "schema_violation");
  // The server allows no torch compute in the extension: a request may forbid more, not allow more.
  refused({{"libraries", {{"torch_compute_in_extension", true}}}}, "policy.libraries.torch_compute_in_extension",
          "unsupported_policy");
  refused({{"libraries", {{"derive_from_reference", false}}}}, "policy.libraries.derive_from_reference",
          "unsupported_policy");
  // In a batch, the request is named too.
  nlohmann::json batch = {{"requests", {request("plain"), request("plain")}}};
  batch["requests"][1]["policy"] = {{"tolerance", "loose"}};
  const ca::ServiceError error = refusal([&] { service->submit(batch); });
  CHECK(std::string(error.what()).find("requests[1]") != std::string::npos);
  CHECK(std::string(error.what()).find("policy.tolerance") != std::string::npos);
  // A server whose policy leaves a field out lets no request choose it.
  ca::EvaluationServiceOptions options = fixture.options();
  options.state_directory = fixture.root / "fixed-state";
  options.policy.erase("timing_budget");
  service.reset();
  service = fixture.service(options);
  refused({{"timing_budget", {{"seconds", 1}}}}, "policy.timing_budget", "unsupported_policy");
  CHECK(fixture.script->prepared.empty());
}

TEST_CASE("a request whose result is known is answered finished at once, with no files written") {
  ServiceFixture fixture;
  auto service = fixture.service();
  const nlohmann::json body = request("plain");
  const nlohmann::json first = finished(*service, submit_one(*service, body));
  CHECK(first["cached"] == false);
  const nlohmann::json again = service->submit(body, "trainer")["evaluations"][0];
  CHECK(again["stage"] == "finished");  // in the answer to the submission itself
  CHECK(again["cached"] == true);
  CHECK(again["reward"] == first["reward"]);
  CHECK(again["client"] == "trainer");
  CHECK_FALSE(std::filesystem::exists(fixture.root / "state" / "candidates" / again["id"].get<std::string>()));
  CHECK(service->status(again["id"]) == again);
  CHECK(service->metrics().find("cuda_agent_evaluations_cache_hits_total 1") != std::string::npos);
  // Another candidate for the same task is no hit.
  const nlohmann::json other = service->submit(request("plain"))["evaluations"][0];
  CHECK(other["stage"] == "queued");
  CHECK(finished(*service, other["id"])["cached"] == false);
  // A service started again on the same journal answers for the cached evaluation too.
  service.reset();
  service = fixture.service();
  CHECK(service->status(again["id"])["reward"] == first["reward"]);
}

TEST_CASE("a client may hold so many unfinished evaluations, and submit so many in all") {
  ServiceFixture fixture;
  ca::EvaluationServiceOptions options = fixture.options();
  options.clients["small"] = ca::ServiceClient{"small", 1, 2};
  auto service = fixture.service(options);
  const std::string held = submit_one(*service, request("hold"), "small");
  ca::ServiceError error = refusal([&] { service->submit(request("plain"), "small"); });
  CHECK(error.status() == 429);
  CHECK(error.code() == "too_many_in_flight");
  // Another client is not held back by this one.
  const std::string other = submit_one(*service, request("plain"), "other");
  fixture.release();
  CHECK(finished(*service, held)["outcome"] == "evaluated");
  CHECK(finished(*service, other)["outcome"] == "evaluated");
  (void)finished(*service, submit_one(*service, request("plain"), "small"));
  error = refusal([&] { service->submit(request("plain"), "small"); });
  CHECK(error.code() == "quota_exceeded");
}

TEST_CASE("a waiting evaluation is cancelled, one past its deadline expires") {
  ServiceFixture fixture;
  auto service = fixture.service();
  const std::string held = submit_one(*service, request("hold"));
  const std::string waiting = submit_one(*service, request("plain"));
  nlohmann::json hurried = request("plain");
  hurried["deadline_s"] = 0.01;
  const std::string expiring = submit_one(*service, hurried);
  std::this_thread::sleep_for(50ms);
  (void)service->cancel(waiting);
  const nlohmann::json cancelled = service->wait(waiting, 5s);
  CHECK(cancelled["stage"] == "finished");
  CHECK(cancelled["outcome"] == "cancelled");
  CHECK(cancelled["reward"].is_null());
  fixture.release();
  CHECK(finished(*service, held)["outcome"] == "evaluated");
  CHECK(finished(*service, expiring)["outcome"] == "expired");
}

TEST_CASE("the journal: a service started again answers for finished evaluations and runs the unfinished ones") {
  ServiceFixture fixture;
  std::string done;
  std::string interrupted;
  {
    auto first = fixture.service();
    done = submit_one(*first, request("plain"));
    CHECK(finished(*first, done)["reward"]["value"] == 1);
    interrupted = submit_one(*first, request("hold"));
    // The service goes while its evaluation runs: what runs finishes its stage and is left
    // unfinished in the journal, as a crash would leave it.
    std::thread releaser([&] {
      std::this_thread::sleep_for(100ms);
      fixture.release();
    });
    first.reset();
    releaser.join();
  }
  // The candidate's files are in the journal: the new service needs nothing else.
  auto second = fixture.service();
  CHECK(second->health()["recovered"] == 1);
  CHECK(second->status(done)["reward"]["value"] == 1);
  const nlohmann::json resumed = finished(*second, interrupted);
  CHECK(resumed["outcome"] == "evaluated");
  CHECK(resumed["reward"]["value"] == 1);
  second.reset();
  // A third start finds both finished, and nothing to run.
  auto third = fixture.service();
  CHECK(third->health()["recovered"] == 0);
  CHECK(third->status(interrupted)["outcome"] == "evaluated");
}

TEST_CASE("a journal cut short by a crash loses only its last, incomplete line") {
  ServiceFixture fixture;
  std::string done;
  {
    auto first = fixture.service();
    done = submit_one(*first, request("plain"));
    (void)finished(*first, done);
  }
  std::ofstream(fixture.root / "state" / "journal.jsonl", std::ios::app) << R"({"type": "accepted", "id": "ev-cut)";
  auto second = fixture.service();
  CHECK(second->status(done)["outcome"] == "evaluated");
  CHECK(second->health()["recovered"] == 0);
}

TEST_CASE("drain: new requests are refused while the accepted ones finish") {
  ServiceFixture fixture;
  auto service = fixture.service();
  const std::string held = submit_one(*service, request("hold"));
  std::thread drainer([&] { service->drain(); });
  for (int i = 0; i < 200 && !service->draining(); ++i) std::this_thread::sleep_for(5ms);
  const ca::ServiceError error = refusal([&] { service->submit(request("plain")); });
  CHECK(error.status() == 503);
  CHECK(service->health()["status"] == "draining");
  fixture.release();
  drainer.join();
  CHECK(service->status(held)["outcome"] == "evaluated");
}

TEST_CASE("a service started again keeps only the newest results it may keep, in memory and in its journal") {
  ServiceFixture fixture;
  std::vector<std::string> ids;
  {
    auto first = fixture.service();
    for (int i = 0; i < 3; ++i) ids.push_back(submit_one(*first, request("plain", std::to_string(i))));
    for (const std::string& id : ids) (void)finished(*first, id);
  }
  ca::EvaluationServiceOptions options = fixture.options();
  options.max_results_kept = 2;
  auto second = fixture.service(options);
  CHECK(refusal([&] { (void)second->status(ids[0]); }).status() == 404);
  CHECK(second->status(ids[1])["outcome"] == "evaluated");
  CHECK(second->status(ids[2])["outcome"] == "evaluated");
  std::ifstream journal(fixture.root / "state" / "journal.jsonl");
  const std::string text{std::istreambuf_iterator<char>(journal), std::istreambuf_iterator<char>()};
  CHECK(text.find(ids[0]) == std::string::npos);
  CHECK(text.find(ids[2]) != std::string::npos);
}

TEST_CASE("remote workers: one of an older protocol is refused, and one quarantined shows in health and metrics") {
  ServiceFixture fixture;
  ca::EvaluationServiceOptions options = fixture.options();
  options.pool.slots.clear();
  options.pool.remote_workers = true;
  options.pool.quarantine_after = 1;
  auto service = fixture.service(options);

  // A worker from before workers said their environment.
  const ca::ServiceError old = refusal([&] { (void)service->register_worker({{"name", "old"}, {"capacity", 1}}); });
  CHECK(old.status() == 400);
  CHECK(old.code() == "unsupported_protocol");
  CHECK(std::string(old.what()).find("worker protocol 2") != std::string::npos);

  const nlohmann::json registration = ca::WorkerRegistration{"gpu7", 1, {}, "cuda H100 torch 2.5"};
  const std::string worker = service->register_worker(registration)["worker"];
  nlohmann::json listed = service->workers()["workers"];
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["registration"]["environment"] == "cuda H100 torch 2.5");
  CHECK(listed[0]["quarantined"].is_null());
  CHECK(service->health()["quarantined_workers"].empty());
  CHECK(service->metrics().find("\ncuda_agent_remote_workers_quarantined 0\n") != std::string::npos);

  const std::string id = submit_one(*service, request("plain"));
  const nlohmann::json leases = service->lease(worker, {{"max", 1U}}, 5s)["leases"];
  REQUIRE(leases.size() == 1);
  const nlohmann::json failed = {{"lease", leases[0]["lease"]},
                                 {"result", {{"outcome", "infrastructure_error"}, {"message", "no CUDA device"}}}};
  CHECK(service->complete(worker, failed)["counted"] == true);
  CHECK(finished(*service, id)["outcome"] == "infrastructure_error");  // no other worker to try

  const nlohmann::json quarantined = service->health()["quarantined_workers"];
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0]["worker"] == worker);
  CHECK(quarantined[0]["name"] == "gpu7");
  CHECK(quarantined[0]["why"].get<std::string>().find("no CUDA device") != std::string::npos);
  CHECK(service->workers()["workers"][0]["quarantined"].is_string());
  const std::string metrics = service->metrics();
  CHECK(metrics.find("\ncuda_agent_remote_workers_quarantined 1\n") != std::string::npos);
  CHECK(metrics.find("\ncuda_agent_remote_workers_quarantined_total 1\n") != std::string::npos);
}

namespace {

/// The service over the trusted evaluator of the real harness, on one CPU slot. The builder
/// and the slot share one verifier, whose warm workers also time (the requests of a test go
/// one at a time, so that no build's checks meet a timing session in them). The server
/// allows cuBLAS for every task (a fixed library policy), which a request may take back.
struct TrustedService {
  ca::testing::ScratchDirectory scratch{"service-policy"};
  std::unique_ptr<ca::EvaluationService> service;

  TrustedService() {
    auto verifier = std::make_shared<ca::HarnessVerifier>(ca::testing::harness_options("cpu"));
    ca::HarnessProfilerOptions timing = ca::testing::quick_cpu_timing();
    timing.compile_backend = "eager";  // dynamo without inductor: quick, and still the compile path
    timing.baseline_cache_directory = scratch.path() / "baselines";
    timing.timeout = std::chrono::seconds(300);
    const std::filesystem::path work = scratch.path();
    const auto evaluator = [verifier, timing, work] {
      ca::TrustedEvaluatorOptions options;
      options.work_directory = work / "evaluations";
      return ca::AnyStagedEvaluator(ca::TrustedEvaluator<ca::SharedVerifier<ca::HarnessVerifier>, ca::ProcessSandbox>(
          ca::testing::test_compiler("cpu", work), ca::SharedVerifier<ca::HarnessVerifier>(verifier),
          ca::AnyProfiler(ca::HarnessProfiler(timing, ca::WorkerTimingLauncher(verifier))), options));
    };
    ca::EvaluationServiceOptions options;
    options.pool.slots = {{"cpu", 0}};
    options.pool.work_directory = work / "pool";
    options.state_directory = work / "state";
    options.policy["timing_budget"] = {{"seconds", timing.budget.seconds}, {"max_rounds", timing.budget.max_rounds}};
    options.policy["libraries"]["derive_from_reference"] = false;
    service = std::make_unique<ca::EvaluationService>(options, evaluator(),
                                                      [evaluator](const ca::PoolSlot&) { return evaluator(); });
  }

  nlohmann::json evaluate(const nlohmann::json& body) {
    const std::string id = service->submit(body)["evaluations"][0]["id"];
    const nlohmann::json status = service->wait(id, 900s);
    REQUIRE(status["stage"] == "finished");
    INFO(status.dump(1).substr(0, 6000));
    REQUIRE(status["outcome"] == "evaluated");
    return status;
  }
};

/// ReLU off by one part in a thousand: inside the paper's tolerance (1e-2), outside
/// KernelBench's (1e-4). Its scale comes from a helper named as cuBLAS names its calls: no
/// extension calls cuBLAS on the CPU, and the source checks go by names.
constexpr const char* relu_off_by_a_thousandth = R"(#include <torch/extension.h>

namespace {
float cublas_named_scale() { return 1.001f; }
}  // namespace

torch::Tensor relu(const torch::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "expects a contiguous float32 CPU tensor");
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const float scale = cublas_named_scale();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] < 0.f ? 0.f : in[i] * scale;
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
)";

nlohmann::json relu_request(const nlohmann::json& policy) {
  return {
      {"task",
       {{"name", "relu"},
        {"source", ca::testing::read_text(ca::testing::adversarial_directory() / "tasks" / "cpu" / "relu.py")}}},
      {"candidate",
       {{"files", {{"model_new.py", ca::testing::relu_model_new}, {"kernels/relu.cpp", relu_off_by_a_thousandth}}}}},
      {"policy", policy}};
}

}  // namespace

TEST_CASE("each request is judged by its own tolerance profile and library policy and timed within its own budget",
          "[python]") {
  TrustedService trusted;

  // The server's tolerance accepts the candidate, and its timing keeps to the request's budget.
  const nlohmann::json accepted =
      trusted.evaluate(relu_request({{"timing_budget", {{"seconds", 0.5}, {"max_rounds", 5}}}}));
  INFO(accepted["rejection"].dump());
  CHECK(accepted["rejection"].is_null());
  CHECK(accepted["reward"]["value"] == 1);
  CHECK(accepted["policy"]["tolerance"] == "default");
  const nlohmann::json& verification = accepted["evaluation"]["verification"];
  CHECK(verification["correct"] == true);
  CHECK(verification["details"]["tolerance"] == nlohmann::json(ca::TolerancePolicy::paper()));
  CHECK(accepted["evaluation"]["compile"]["details"]["library_policy"]["cublas"] == true);
  const nlohmann::json& profile = accepted["evaluation"]["profile"];
  REQUIRE(profile.is_object());
  CHECK(profile["details"]["budget"] == nlohmann::json{{"seconds", 0.5}, {"max_rounds", 5}});
  CHECK(profile["details"]["rounds"].get<int>() <= 5);

  // The strict profile refuses the same candidate for its values.
  const nlohmann::json strict = trusted.evaluate(relu_request({{"tolerance", "strict"}, {"timing", false}}));
  REQUIRE(strict["rejection"].is_object());
  CHECK(strict["rejection"]["reason"] == "value_mismatch");
  CHECK(strict["reward"]["value"] == -1);
  CHECK(strict["cached"] == false);
  CHECK(strict["evaluation"]["verification"]["details"]["tolerance"] == nlohmann::json(ca::TolerancePolicy::strict()));

  // A library policy without cuBLAS refuses it for the library, before anything is built.
  const nlohmann::json no_cublas =
      trusted.evaluate(relu_request({{"libraries", {{"cublas", false}}}, {"timing", false}}));
  REQUIRE(no_cublas["rejection"].is_object());
  CHECK(no_cublas["rejection"]["reason"] == "forbidden_module");
  CHECK(no_cublas["rejection"]["message"].get<std::string>().find("cuBLAS") != std::string::npos);
  CHECK(no_cublas["reward"]["value"] == -1);
  CHECK(no_cublas["policy"]["libraries"]["cublas"] == false);
}
