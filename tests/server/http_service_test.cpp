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
#include "service/trusting_toolbox.hpp"

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
  std::unique_ptr<ca::EpisodeService> episodes;
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
    ca::EpisodeServiceOptions episode_options;
    episode_options.state_directory = root / "episodes";
    episode_options.workspace.device = "cpu";
    episodes = std::make_unique<ca::EpisodeService>(episode_options, *service, ca::testing::trusting_toolbox());
    options.port = 0;
    http = std::make_unique<ca::HttpService>(*service, options, episodes.get());
    http->bind();
    listener = std::thread([this] { http->run(); });
  }
  ~Served() {
    release();
    http->stop();
    listener.join();
    http.reset();
    episodes.reset();
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
  // A policy the evaluation could not follow, its field named.
  nlohmann::json loose = nlohmann::json::parse(request_body("plain"));
  loose["policy"] = {{"tolerance", "loose"}};
  result = client.Post("/v1/evaluations", loose.dump(), "application/json");
  CHECK(result->status == 400);
  CHECK(error_code(result) == "schema_violation");
  CHECK(json_of(result)["error"]["message"].get<std::string>().find("policy.tolerance") != std::string::npos);
  nlohmann::json permissive = nlohmann::json::parse(request_body("plain"));
  permissive["policy"] = {{"libraries", {{"dynamic_loading", true}}}};
  result = client.Post("/v1/evaluations", permissive.dump(), "application/json");
  CHECK(result->status == 400);
  CHECK(error_code(result) == "unsupported_policy");
  CHECK(json_of(result)["error"]["message"].get<std::string>().find("policy.libraries.dynamic_loading") !=
        std::string::npos);
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

namespace {

constexpr const char* relu_task =
    R"({"name": "plain", "source": "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(8)]\n\n\ndef get_init_inputs():\n    return []\n"})";

/// The cookie a response sets, as a client sends it back ("name=value").
std::string cookie_of(const httplib::Result& result) {
  REQUIRE(result);
  const std::string header = result->get_header_value("Set-Cookie");
  return header.substr(0, header.find(';'));
}

}  // namespace

TEST_CASE("over HTTP: a NeMo-Gym-shaped client seeds a session, calls tools with its cookie, verifies, closes") {
  Served served;
  auto client = served.client();
  // A data row as NeMo-Gym sends it: the Responses API parameters, and the fields of ours.
  const std::string row = std::string(R"({"responses_create_params": {"input": [{"role": "user", "content": "go"}]},
                                          "policy": {"tolerance": "strict"}, "task": )") +
                          relu_task + "}";
  httplib::Result seeded = client.Post("/seed_session", row, "application/json");
  REQUIRE(seeded);
  CHECK(seeded->status == 200);
  const std::string cookie = cookie_of(seeded);
  CHECK(cookie.rfind("cuda_agent_episode=ep-", 0) == 0);
  CHECK(seeded->get_header_value("Set-Cookie").find("HttpOnly") != std::string::npos);
  CHECK(json_of(seeded)["tools"].size() == 7);
  const httplib::Headers session = {{"Cookie", "other=1; " + cookie}};

  // One route per tool: the body is the call's arguments, the answer the tool's text.
  httplib::Result read = client.Post("/Read", session, R"({"file_path": "model_new.py"})", "application/json");
  REQUIRE(read);
  CHECK(read->status == 200);
  const nlohmann::json read_result = json_of(read);
  CHECK(read_result["is_error"] == false);
  CHECK(read_result["content"].get<std::string>().find("ModelNew") != std::string::npos);
  CHECK_FALSE(read_result.contains("metadata"));  // NeMo-Gym hands the body to the model
  httplib::Result wrote = client.Post(
      "/Write", session,
      R"({"file_path": "model_new.py", "content": "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"})",
      "application/json");
  CHECK(json_of(wrote)["is_error"] == false);
  httplib::Result failing = client.Post("/Bash", session, R"({"command": "exit 3"})", "application/json");
  CHECK(failing->status == 200);
  CHECK(json_of(failing)["is_error"] == true);

  // Without the cookie there is no episode to speak of; a tool the episode lacks is 404.
  httplib::Result anonymous = client.Post("/Read", R"({"file_path": "model.py"})", "application/json");
  CHECK(anonymous->status == 400);
  CHECK(error_code(anonymous) == "no_session");
  CHECK(error_code(client.Post("/Teleport", session, "{}", "application/json")) == "unknown_tool");

  // /verify: the row and the agent's response back, with the reward of the trusted evaluation.
  const std::string verify_body = std::string(R"({"responses_create_params": {"input": []},
                                                  "response": {"id": "resp-1", "output": []}})");
  httplib::Result verified = client.Post("/verify", session, verify_body, "application/json");
  REQUIRE(verified);
  CHECK(verified->status == 200);
  const nlohmann::json verdict = json_of(verified);
  CHECK(verdict["reward"] == 1.0);
  CHECK(verdict["mask_sample"] == false);
  CHECK(verdict["response"]["id"] == "resp-1");
  CHECK(verdict["evaluation"]["outcome"] == "evaluated");
  // Evaluated with the policy the data row chose.
  CHECK(verdict["evaluation"]["policy"]["tolerance"] == "strict");
  // Tools end with the episode's evaluation.
  CHECK(error_code(client.Post("/Read", session, R"({"file_path": "model.py"})", "application/json")) ==
        "episode_finished");

  CHECK(client.Post("/close_session", session, "{}", "application/json")->status == 200);
  CHECK(client.Post("/Read", session, "{}", "application/json")->status == 404);
  // A verify for a session gone is masked, not scored: the trainer's run goes on.
  const nlohmann::json lost = json_of(client.Post("/verify", session, verify_body, "application/json"));
  CHECK(lost["mask_sample"] == true);
  CHECK(lost["failure_kind"] == "cuda_agent:not_found");
  CHECK(lost["reward"] == 0.0);
}

TEST_CASE("over HTTP: the episode routes open, run tools, finish and close an episode") {
  ca::HttpServiceOptions options;
  options.tokens = {{trainer_token, "trainer"}, {"another-token-0123456789", "other"}};
  Served served(options);
  auto client = served.client(trainer_token);
  httplib::Result opened =
      client.Post("/v1/episodes",
                  std::string(R"({"task": )") + relu_task +
                      R"(, "metadata": {"sample": 3}, "policy": {"timing_budget": {"seconds": 0.5}}})",
                  "application/json");
  REQUIRE(opened);
  CHECK(opened->status == 201);
  const nlohmann::json episode = json_of(opened);
  const std::string id = episode["id"];
  CHECK(episode["skill"].get<std::string>().size() > 100);
  CHECK(episode["files"].contains("model.py"));
  CHECK(episode["client"] == "trainer");
  CHECK(episode["policy"]["timing_budget"]["seconds"] == 0.5);

  const std::string tools = "/v1/episodes/" + id + "/tools/";
  const nlohmann::json listed = json_of(client.Post(tools + "Glob", R"({"pattern": "**/*.py"})", "application/json"));
  CHECK(listed["content"].get<std::string>().find("model_new.py") != std::string::npos);
  CHECK(listed.contains("metadata"));
  CHECK(error_code(client.Post(tools + "Glob", "[1, 2]", "application/json")) == "invalid_arguments");
  CHECK(error_code(client.Post(tools + "Glob", "{\"pattern\": ", "application/json")) == "invalid_json");
  // Another client's episode does not exist for it; without a token nothing does.
  CHECK(served.client("another-token-0123456789").Get("/v1/episodes/" + id)->status == 404);
  CHECK(served.client().Post(tools + "Glob", "{}", "application/json")->status == 401);
  CHECK(error_code(client.Post("/v1/episodes", R"({"task": {"name": "x"}, "extra": 1})", "application/json")) ==
        "schema_violation");
  CHECK(error_code(client.Post("/v1/episodes",
                               std::string(R"({"task": )") + relu_task + R"(, "policy": {"tolerance": "loose"}})",
                               "application/json")) == "schema_violation");

  httplib::Result finished = client.Post("/v1/episodes/" + id + "/finish?wait=30", "", "application/json");
  REQUIRE(finished);
  CHECK(finished->status == 200);
  const nlohmann::json evaluation = json_of(finished)["evaluation"];
  CHECK(evaluation["reward"]["value"] == 1);
  CHECK(evaluation["policy"]["timing_budget"]["seconds"] == 0.5);
  CHECK(evaluation["evaluation"]["profile"]["details"]["policy"]["timing_budget"]["seconds"] == 0.5);
  CHECK(evaluation["metadata"]["sample"] == 3);
  CHECK(evaluation["client"] == "trainer");
  // The evaluation is one of the service's: readable where every evaluation is.
  const std::string evaluation_id = evaluation["id"];
  CHECK(json_of(client.Get("/v1/evaluations/" + evaluation_id))["outcome"] == "evaluated");
  const nlohmann::json status = json_of(client.Get("/v1/episodes/" + id));
  CHECK(status["finished"] == true);
  CHECK(status["tool_calls"] == 1);

  CHECK(client.Delete("/v1/episodes/" + id)->status == 200);
  CHECK(error_code(client.Get("/v1/episodes/" + id)) == "not_found");
}
