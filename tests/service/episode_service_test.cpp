// SPDX-License-Identifier: Apache-2.0
// Episodes without HTTP: opening one (its workspace, SKILL.md and tools), tool calls in it,
// finishing it through the evaluation service, idle expiry, closing, clients kept apart,
// and a service started again on the same directory reopening what it finds.
#include "catch.hpp"

#include <cuda_agent/service/episode_service.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "service/scripted_evaluator.hpp"
#include "service/trusting_toolbox.hpp"

namespace ca = cuda_agent;
using namespace std::chrono_literals;
using cuda_agent::testing::Script;
using cuda_agent::testing::ScriptedEvaluator;

namespace {

constexpr const char* relu_source = R"(import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
)";

/// A tool that says how often it was called in its episode, and waits while told to.
struct CounterTool {
  std::shared_ptr<std::atomic<bool>> hold;
  int calls = 0;
  [[nodiscard]] std::string_view name() const { return "Counter"; }
  [[nodiscard]] std::string_view description() const { return "Counts its calls."; }
  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"}, {"properties", nlohmann::json::object()}};
  }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext&) {
    while (hold && *hold) std::this_thread::sleep_for(5ms);
    return ca::ToolResult::success(std::to_string(++calls));
  }
};

/// A tool that says the evaluation policy its episode was equipped with.
struct PolicyTool {
  std::string policy;
  [[nodiscard]] std::string_view name() const { return "Policy"; }
  [[nodiscard]] std::string_view description() const { return "Says the episode's evaluation policy."; }
  [[nodiscard]] nlohmann::json parameters() const {
    return {{"type", "object"}, {"properties", nlohmann::json::object()}};
  }
  ca::ToolResult invoke(const nlohmann::json&, ca::ToolContext&) { return ca::ToolResult::success(policy); }
};

struct EpisodeFixture {
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("cuda-agent-episode-test-" + ca::detail::random_hex(4));
  std::shared_ptr<std::atomic<bool>> hold = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<int>> toolboxes_made = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<ca::EvaluationService> evaluations;

  EpisodeFixture() {
    ca::EvaluationServiceOptions options;
    options.pool.slots = {{"cpu", 0}};
    options.pool.work_directory = root / "pool";
    options.state_directory = root / "state";
    auto shared = script;
    evaluations = std::make_unique<ca::EvaluationService>(
        options, ScriptedEvaluator{script},
        [shared](const ca::PoolSlot&) { return ca::AnyStagedEvaluator(ScriptedEvaluator{shared}); });
  }
  ~EpisodeFixture() {
    *hold = false;
    evaluations.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root, ignored);
  }

  [[nodiscard]] ca::EpisodeServiceOptions options() const {
    ca::EpisodeServiceOptions options;
    options.state_directory = root / "episodes";
    options.workspace.device = "cpu";
    return options;
  }

  /// The file tools, Bash unconfined (the test trusts itself), and the counter.
  [[nodiscard]] ca::EpisodeToolboxFactory toolbox() const {
    return [hold = hold, made = toolboxes_made](const ca::EpisodeSetup& setup) {
      ++*made;
      return ca::testing::trusting_toolbox([&hold](ca::ToolRegistry& tools) { tools.add(CounterTool{hold}); })(setup);
    };
  }

  std::unique_ptr<ca::EpisodeService> service(ca::EpisodeServiceOptions options) {
    return std::make_unique<ca::EpisodeService>(std::move(options), *evaluations, toolbox());
  }
  /// Episodes whose tools include Policy.
  std::unique_ptr<ca::EpisodeService> service_telling_policies() {
    return std::make_unique<ca::EpisodeService>(options(), *evaluations, [](const ca::EpisodeSetup& setup) {
      const std::string policy = nlohmann::json(setup.policy).dump();
      return ca::testing::trusting_toolbox([policy](ca::ToolRegistry& tools) { tools.add(PolicyTool{policy}); })(setup);
    });
  }
  std::unique_ptr<ca::EpisodeService> service() { return service(options()); }
};

nlohmann::json opening(const std::string& name = "relu") {
  return {{"task", {{"name", name}, {"source", relu_source}}}, {"metadata", {{"rollout", 7}}}};
}

int status_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ca::ServiceError& error) {
    return error.status();
  }
  return 0;
}

std::string code_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ca::ServiceError& error) {
    return error.code();
  }
  return "";
}

}  // namespace

TEST_CASE("episode service: an episode opens with its workspace, SKILL.md, files and tools", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  const nlohmann::json episode = episodes->open(opening());
  const std::string id = episode["id"];
  CHECK(id.rfind("ep-", 0) == 0);
  CHECK(episode["task"] == "relu");
  CHECK(episode["metadata"]["rollout"] == 7);
  CHECK(episode["skill"].get<std::string>().find("model_new.py") != std::string::npos);
  CHECK(episode["files"]["model.py"] == relu_source);
  CHECK(episode["files"].contains("model_new.py"));
  CHECK_FALSE(episode["files"].contains("SKILL.md"));  // given once, as "skill"
  std::vector<std::string> tools;
  for (const nlohmann::json& tool : episode["tools"]) {
    tools.push_back(tool["name"]);
    CHECK(tool["parameters"]["type"] == "object");
  }
  CHECK(tools == std::vector<std::string>{"Bash", "Glob", "Grep", "Read", "Edit", "MultiEdit", "Write", "Counter"});
  const std::filesystem::path workspace = fixture.root / "episodes" / id / "workspace";
  CHECK(std::filesystem::exists(workspace / "SKILL.md"));
  CHECK(std::filesystem::exists(fixture.root / "episodes" / id / "episode.json"));
  CHECK(episodes->size() == 1);
  CHECK(episodes->status(id)["tool_calls"] == 0);
  CHECK(episodes->status(id)["finished"] == false);
}

TEST_CASE("episode service: a request that is not a task is refused with what is wrong", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  CHECK(code_of([&] { (void)episodes->open(nlohmann::json::array()); }) == "invalid_request");
  CHECK(code_of([&] { (void)episodes->open({{"task", {{"name", "x"}}}, {"colour", "red"}}); }) == "schema_violation");
  CHECK(code_of([&] { (void)episodes->open({{"task", {{"name", "x"}}}}); }) == "invalid_request");
  CHECK(code_of([&] { (void)episodes->open({{"task", {{"path", "/etc/passwd"}}}}); }) == "host_paths_refused");
  CHECK(episodes->size() == 0);
  // Nothing is left behind by a refusal.
  CHECK(std::filesystem::is_empty(fixture.root / "episodes"));
}

TEST_CASE("episode service: tool calls run in the episode's workspace and count", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  const std::string id = episodes->open(opening())["id"];
  const nlohmann::json read = episodes->call_tool(id, "Read", {{"file_path", "model_new.py"}});
  CHECK(read["is_error"] == false);
  CHECK(read["content"].get<std::string>().find("ModelNew") != std::string::npos);
  const nlohmann::json bash = episodes->call_tool(id, "Bash", {{"command", "ls kernels model.py"}});
  CHECK(bash["is_error"] == false);
  CHECK(bash["content"].get<std::string>().find("model.py") != std::string::npos);
  // The model's mistakes are results it reads, not refusals.
  const nlohmann::json missing = episodes->call_tool(id, "Read", {{"file_path", "nowhere.py"}});
  CHECK(missing["is_error"] == true);
  const nlohmann::json protected_write =
      episodes->call_tool(id, "Write", {{"file_path", "model.py"}, {"content", "x = 1\n"}});
  CHECK(protected_write["is_error"] == true);
  CHECK(episodes->status(id)["tool_calls"] == 4);

  CHECK(code_of([&] { (void)episodes->call_tool(id, "Teleport", nlohmann::json::object()); }) == "unknown_tool");
  CHECK(code_of([&] { (void)episodes->call_tool(id, "Read", nlohmann::json::array()); }) == "invalid_arguments");
  CHECK(code_of([&] { (void)episodes->call_tool("ep-none", "Read", nlohmann::json::object()); }) == "not_found");
}

TEST_CASE("episode service: another client's episode does not exist for it", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  const std::string id = episodes->open(opening(), "trainer-a")["id"];
  CHECK(status_of([&] { (void)episodes->status(id, "trainer-b"); }) == 404);
  CHECK(status_of([&] { (void)episodes->call_tool(id, "Counter", nlohmann::json::object(), "trainer-b"); }) == 404);
  CHECK(status_of([&] { (void)episodes->finish(id, 0ms, "trainer-b"); }) == 404);
  CHECK(status_of([&] { episodes->close(id, "trainer-b"); }) == 404);
  CHECK(episodes->call_tool(id, "Counter", nlohmann::json::object(), "trainer-a")["content"] == "1");
}

TEST_CASE("episode service: finish evaluates the workspace's candidate once, and ends the tool calls", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  const std::string id = episodes->open(opening("correct_task"))["id"];
  const std::string candidate = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass  # " + id + "\n";
  REQUIRE(episodes->call_tool(id, "Read", {{"file_path", "model_new.py"}})["is_error"] == false);
  REQUIRE(episodes->call_tool(id, "Write", {{"file_path", "model_new.py"}, {"content", candidate}})["is_error"] ==
          false);
  const nlohmann::json finished = episodes->finish(id, 30s);
  CHECK(finished["episode"] == id);
  const nlohmann::json& evaluation = finished["evaluation"];
  CHECK(evaluation["stage"] == "finished");
  CHECK(evaluation["outcome"] == "evaluated");
  CHECK(evaluation["reward"].is_object());
  CHECK(evaluation["metadata"]["episode"] == id);
  CHECK(evaluation["metadata"]["rollout"] == 7);
  CHECK(evaluation["task"] == "correct_task");
  // The candidate evaluated is the one the episode wrote.
  CHECK(fixture.script->prepared["correct_task"] == 1);

  // Once: a repeated finish answers with the same evaluation, and runs nothing again.
  const nlohmann::json again = episodes->finish(id, 0ms);
  CHECK(again["evaluation"]["id"] == evaluation["id"]);
  CHECK(fixture.script->prepared["correct_task"] == 1);
  CHECK(episodes->status(id)["finished"] == true);
  CHECK(episodes->status(id)["evaluation_id"] == evaluation["id"]);
  CHECK(code_of([&] { (void)episodes->call_tool(id, "Counter", nlohmann::json::object()); }) == "episode_finished");
}

TEST_CASE("episode service: an episode finished without a candidate is evaluated as what it holds", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  const std::string id = episodes->open(opening("empty"))["id"];
  REQUIRE(episodes->call_tool(id, "Bash", {{"command", "rm -rf model_new.py kernels"}})["is_error"] == false);
  const nlohmann::json evaluation = episodes->finish(id, 30s)["evaluation"];
  CHECK(evaluation["stage"] == "finished");
  CHECK(evaluation["outcome"] == "evaluated");
  // The scripted builder builds nothing without model_new.py: the lowest reward, not an error.
  CHECK(evaluation["reward"]["value"] == -1);
}

TEST_CASE("episode service: close removes the episode and its files", "[service]") {
  EpisodeFixture fixture;
  auto episodes = fixture.service();
  const std::string id = episodes->open(opening())["id"];
  const std::filesystem::path directory = fixture.root / "episodes" / id;
  REQUIRE(std::filesystem::exists(directory));
  episodes->close(id);
  CHECK_FALSE(std::filesystem::exists(directory));
  CHECK(episodes->size() == 0);
  CHECK(code_of([&] { (void)episodes->status(id); }) == "not_found");
  CHECK(code_of([&] { episodes->close(id); }) == "not_found");
}

TEST_CASE("episode service: an idle episode expires, one in a tool call does not", "[service]") {
  EpisodeFixture fixture;
  ca::EpisodeServiceOptions options = fixture.options();
  options.idle_expiry = 300ms;
  auto episodes = fixture.service(options);
  const std::string idle = episodes->open(opening())["id"];
  const std::string busy = episodes->open(opening())["id"];
  *fixture.hold = true;
  std::thread call([&] { (void)episodes->call_tool(busy, "Counter", nlohmann::json::object()); });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (episodes->size() > 1 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(600ms);  // two expiries' worth for the busy one
  CHECK(code_of([&] { (void)episodes->status(idle); }) == "not_found");
  CHECK_FALSE(std::filesystem::exists(fixture.root / "episodes" / idle));
  CHECK(episodes->status(busy)["id"] == busy);
  *fixture.hold = false;
  call.join();
  // Its call just ended: it is not idle now.
  CHECK(episodes->status(busy)["tool_calls"] == 1);
}

TEST_CASE("episode service: a service started again on the directory reopens its episodes", "[service]") {
  EpisodeFixture fixture;
  std::string open_id;
  std::string finished_id;
  std::string evaluation_id;
  {
    auto episodes = fixture.service();
    open_id = episodes->open(opening(), "trainer")["id"];
    REQUIRE(episodes->call_tool(open_id, "Bash", {{"command", "echo kept > kernels/note.txt"}},
                                "trainer")["is_error"] == false);
    finished_id = episodes->open(opening("done"), "trainer")["id"];
    evaluation_id = episodes->finish(finished_id, 30s, "trainer")["evaluation"]["id"];
  }
  // A directory that is no episode any more (its record lost) is cleared away.
  std::filesystem::create_directories(fixture.root / "episodes" / "ep-broken" / "workspace");
  const int made_before = *fixture.toolboxes_made;
  auto episodes = fixture.service();
  CHECK(episodes->size() == 2);
  CHECK(*fixture.toolboxes_made == made_before + 2);
  CHECK_FALSE(std::filesystem::exists(fixture.root / "episodes" / "ep-broken"));
  const nlohmann::json read = episodes->call_tool(open_id, "Bash", {{"command", "cat kernels/note.txt"}}, "trainer");
  CHECK(read["content"].get<std::string>().find("kept") != std::string::npos);
  CHECK(episodes->status(open_id, "trainer")["metadata"]["rollout"] == 7);
  CHECK(status_of([&] { (void)episodes->status(open_id, "local"); }) == 404);
  CHECK(episodes->finish(finished_id, 0ms, "trainer")["evaluation"]["id"] == evaluation_id);
}

TEST_CASE("episode service: an episode opened with a policy gives it to its tools and finishes with it", "[service]") {
  EpisodeFixture fixture;
  std::string id;
  {
    auto episodes = fixture.service_telling_policies();
    nlohmann::json request = opening("strict_task");
    request["policy"] = {{"tolerance", "strict"}, {"libraries", {{"cublas", false}}}};
    const nlohmann::json opened = episodes->open(request);
    id = opened["id"];
    // The evaluation service's policy with the episode's choices.
    nlohmann::json expected = ca::EvaluationServiceOptions{}.policy;
    expected["tolerance"] = "strict";
    expected["libraries"]["cublas"] = false;
    CHECK(opened["policy"] == expected);
    const nlohmann::json told = nlohmann::json::parse(
        episodes->call_tool(id, "Policy", nlohmann::json::object())["content"].get<std::string>());
    CHECK(told["tolerance"] == "strict");
    CHECK(told["libraries"]["cublas"] == false);
  }
  // Kept across a restart, and the trusted evaluation uses it.
  auto episodes = fixture.service_telling_policies();
  CHECK(episodes->status(id)["policy"]["tolerance"] == "strict");
  const nlohmann::json evaluation = episodes->finish(id, 30s)["evaluation"];
  REQUIRE(evaluation["outcome"] == "evaluated");
  CHECK(evaluation["policy"]["tolerance"] == "strict");
  CHECK(evaluation["policy"]["libraries"]["cublas"] == false);
  CHECK(evaluation["evaluation"]["verification"]["details"]["policy"]["tolerance"] == "strict");

  // One that names nothing gets the evaluation service's own.
  const nlohmann::json plain = episodes->open(opening());
  CHECK(plain["policy"] == ca::EvaluationServiceOptions{}.policy);
  CHECK(episodes->finish(plain["id"], 30s)["evaluation"]["policy"] == ca::EvaluationServiceOptions{}.policy);

  // A policy the evaluation could not follow opens nothing, and the refusal names the field.
  const auto refusal_of = [&](const nlohmann::json& policy) {
    nlohmann::json request = opening();
    request["policy"] = policy;
    try {
      (void)episodes->open(request);
    } catch (const ca::ServiceError& error) {
      CHECK(error.status() == 400);
      return error.code() + ": " + error.what();
    }
    return std::string("opened");
  };
  const std::size_t open_before = episodes->size();
  std::string refused = refusal_of({{"tolerance", "loose"}});
  CHECK(refused.find("schema_violation") == 0);
  CHECK(refused.find("tolerance") != std::string::npos);
  refused = refusal_of({{"timing_budget", {{"seconds", -1}}}});
  CHECK(refused.find("timing_budget.seconds") != std::string::npos);
  refused = refusal_of({{"device", "cuda"}});
  CHECK(refused.find("unsupported_policy") == 0);
  CHECK(refused.find("policy.device") != std::string::npos);
  CHECK(refusal_of(3).find("schema_violation") == 0);
  CHECK(episodes->size() == open_before);
}

TEST_CASE("episode service: at most max_episodes are open, and none while the service drains", "[service]") {
  EpisodeFixture fixture;
  ca::EpisodeServiceOptions options = fixture.options();
  options.max_episodes = 2;
  auto episodes = fixture.service(options);
  const std::string first = episodes->open(opening())["id"];
  const std::string second = episodes->open(opening())["id"];
  CHECK(code_of([&] { (void)episodes->open(opening()); }) == "too_many_episodes");
  episodes->close(first);
  CHECK_NOTHROW(episodes->open(opening()));
  CHECK(episodes->size() == 2);
  fixture.evaluations->drain();
  episodes->close(second);
  CHECK(code_of([&] { (void)episodes->open(opening()); }) == "draining");
}
