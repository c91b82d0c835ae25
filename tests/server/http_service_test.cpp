// SPDX-License-Identifier: Apache-2.0
// The service's HTTP face on loopback: submit, wait, status, cancel, progress as
// server-sent events, health and metrics, and every kind of bad request answered with a
// JSON error; bearer tokens where they are required.
#include "catch.hpp"

#include <cuda_agent/server/http_service.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "service/scripted_evaluator.hpp"

namespace ca = cuda_agent;
using namespace std::chrono_literals;
using cuda_agent::testing::Script;
using cuda_agent::testing::ScriptedEvaluator;

namespace {

constexpr const char* trainer_token = "trainer-token-0123456789";

/// A service with one CPU slot and the scripted evaluator, served on a free loopback port.
struct Served {
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-http-test-" + ca::detail::random_hex(4));
  std::unique_ptr<ca::EvaluationService> service;
  std::unique_ptr<ca::HttpService> http;
  std::thread listener;

  explicit Served(ca::HttpServiceOptions options = {}, std::size_t max_in_flight = 256) {
    ca::EvaluationServiceOptions service_options;
    service_options.pool.slots = {{"cpu", 0}};
    service_options.pool.work_directory = root / "pool";
    service_options.state_directory = root / "state";
    service_options.default_client.max_in_flight = max_in_flight;
    auto shared = script;
    service = std::make_unique<ca::EvaluationService>(
        service_options, ScriptedEvaluator{script},
        [shared](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(ScriptedEvaluator{shared}); });
    options.port = 0;
    http = std::make_unique<ca::HttpService>(*service, options);
    http->bind();
    listener = std::thread([this] { http->run(); });
  }
  ~Served() {
    release();
    http->stop();
    listener.join();
    http.reset();
    service.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }

  httplib::Client client(const std::string& token = "") const {
    httplib::Client client("127.0.0.1", http->port());
    client.set_read_timeout(30, 0);
    if (!token.empty()) client.set_bearer_token_auth(token);
    return client;
  }

  void release() {
    const std::lock_guard lock(script->mutex);
    script->release = true;
    script->changed.notify_all();
  }
};

std::string request_body(const std::string& task) {
  return nlohmann::json{{"task", {{"name", task}, {"source", "# " + task + "\n"}}},
                        {"candidate", {{"files", {{"model_new.py", "# " + ca::detail::random_hex(6) + "\n"}}}}}}
      .dump();
}

nlohmann::json json_of(const httplib::Result& result) {
  REQUIRE(result);
  const nlohmann::json body = nlohmann::json::parse(result->body, nullptr, false);
  INFO(result->body);
  REQUIRE_FALSE(body.is_discarded());
  return body;
}

/// The code of the JSON error a refusal carries.
std::string error_code(const httplib::Result& result) {
  const nlohmann::json body = json_of(result);
  REQUIRE(body.contains("error"));
  CHECK_FALSE(body["error"]["message"].get<std::string>().empty());
  return body["error"]["code"];
}

}  // namespace

TEST_CASE("over HTTP: submit and wait, read the status, follow the progress, cancel") {
  Served served;
  auto client = served.client();
  // Submitted and waited for: 200 with the reward.
  httplib::Result answer = client.Post("/v1/evaluations?wait=30", request_body("plain"), "application/json");
  REQUIRE(answer);
  CHECK(answer->status == 200);
  const nlohmann::json done = json_of(answer)["evaluations"][0];
  CHECK(done["stage"] == "finished");
  CHECK(done["reward"]["value"] == 1);
  const std::string id = done["id"];
  const nlohmann::json status = json_of(client.Get("/v1/evaluations/" + id));
  CHECK(status["outcome"] == "evaluated");

  // The progress of a finished evaluation streams whole and ends.
  httplib::Result events = client.Get("/v1/evaluations/" + id + "/events");
  REQUIRE(events);
  CHECK(events->status == 200);
  CHECK(events->get_header_value("Content-Type") == "text/event-stream");
  CHECK(events->body.find("event: progress\ndata: {\"at\"") != std::string::npos);
  CHECK(events->body.find("\"stage\":\"queued\"") < events->body.find("\"stage\":\"finished\""));

  // Submitted without waiting: 202, then cancelled while it waits behind a held one.
  const nlohmann::json held = json_of(client.Post("/v1/evaluations", request_body("hold"), "application/json"));
  httplib::Result queued = client.Post("/v1/evaluations", request_body("plain"), "application/json");
  REQUIRE(queued);
  CHECK(queued->status == 202);
  const std::string waiting = json_of(queued)["evaluations"][0]["id"];
  CHECK(client.Delete("/v1/evaluations/" + waiting)->status == 200);
  CHECK(json_of(client.Get("/v1/evaluations/" + waiting + "?wait=10"))["outcome"] == "cancelled");
  served.release();
  const std::string held_id = held["evaluations"][0]["id"];
  CHECK(json_of(client.Get("/v1/evaluations/" + held_id + "?wait=10"))["outcome"] == "evaluated");

  const nlohmann::json health = json_of(client.Get("/healthz"));
  CHECK(health["status"] == "ok");
  CHECK(health["policy"]["tolerance"] == "default");
  httplib::Result metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->get_header_value("Content-Type").rfind("text/plain", 0) == 0);
  CHECK(metrics->body.find("cuda_agent_evaluations_accepted_total 3") != std::string::npos);
}

TEST_CASE("over HTTP: every bad request gets its status and a JSON error") {
  ca::HttpServiceOptions options;
  options.max_body_bytes = 4096;
  Served served(options, /*max_in_flight=*/1);
  auto client = served.client();
  httplib::Result result = client.Post("/v1/evaluations", "{\"task\": ", "application/json");
  CHECK(result->status == 400);
  CHECK(error_code(result) == "invalid_json");
  result = client.Post("/v1/evaluations", R"({"task": {"name": 3}, "candidate": {}})", "application/json");
  CHECK(result->status == 400);
  CHECK(error_code(result) == "schema_violation");
  result = client.Post("/v1/evaluations", std::string(8192, ' '), "application/json");
  CHECK(result->status == 413);
  CHECK(error_code(result) == "body_too_large");
  result = client.Get("/v1/evaluations/ev-unknown");
  CHECK(result->status == 404);
  CHECK(error_code(result) == "not_found");
  result = client.Get("/v1/evaluations/ev-unknown/events");
  CHECK(result->status == 404);
  result = client.Get("/v1/nothing-here");
  CHECK(result->status == 404);
  CHECK(error_code(result) == "not_found");
  result = client.Get("/v1/evaluations/x?wait=soon");
  CHECK(result->status == 400);
  CHECK(error_code(result) == "invalid_parameter");
  // Over the client's limit: 429 until one finishes.
  CHECK(client.Post("/v1/evaluations", request_body("hold"), "application/json")->status == 202);
  result = client.Post("/v1/evaluations", request_body("plain"), "application/json");
  CHECK(result->status == 429);
  CHECK(error_code(result) == "too_many_in_flight");
}

TEST_CASE("over HTTP: with tokens, every route but /healthz needs one, and each token is its client") {
  ca::HttpServiceOptions options;
  options.tokens = {{trainer_token, "trainer"}};
  Served served(options);
  auto anonymous = served.client();
  httplib::Result result = anonymous.Post("/v1/evaluations", request_body("plain"), "application/json");
  CHECK(result->status == 401);
  CHECK(error_code(result) == "unauthorized");
  CHECK(result->get_header_value("WWW-Authenticate") == "Bearer");
  CHECK(anonymous.Get("/metrics")->status == 401);
  CHECK(served.client("wrong-token-0123456789").Get("/metrics")->status == 401);
  CHECK(anonymous.Get("/healthz")->status == 200);
  const nlohmann::json answer =
      json_of(served.client(trainer_token).Post("/v1/evaluations?wait=30", request_body("plain"), "application/json"));
  CHECK(answer["evaluations"][0]["client"] == "trainer");
}

TEST_CASE("a server beyond loopback refuses to start without tokens, and short tokens") {
  ca::EvaluationServiceOptions service_options;
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-http-test-" + ca::detail::random_hex(4));
  service_options.state_directory = root / "state";
  service_options.pool.work_directory = root / "pool";
  auto script = std::make_shared<Script>();
  ca::EvaluationService service(service_options, ScriptedEvaluator{script}, [script](const ca::PoolSlot&) {
    return ca::AnyStagedEvaluator(ScriptedEvaluator{script});
  });
  ca::HttpServiceOptions open;
  open.host = "0.0.0.0";
  CHECK_THROWS_WITH(ca::HttpService(service, open), Catch::Contains("needs at least one bearer token"));
  open.tokens = {{"short", "someone"}};
  CHECK_THROWS_WITH(ca::HttpService(service, open), Catch::Contains("shorter than 16"));
  CHECK(ca::is_loopback_host("127.0.0.1"));
  CHECK(ca::is_loopback_host("::1"));
  CHECK_FALSE(ca::is_loopback_host("10.0.0.1"));
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
}
