// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include "verify/verify_support.hpp"

#include <cuda_agent/resources.hpp>
#include <cuda_agent/sandbox/bubblewrap_sandbox.hpp>
#include <cuda_agent/verify/harness_worker.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

namespace ca = cuda_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

/// One worker in bubblewrap with the harness read-only and its channel directory.
struct WorkerFixture {
  ca::testing::ScratchDirectory scratch{"worker"};
  fs::path harness = scratch.path() / "harness";
  fs::path channel = scratch.path() / "channel";
  fs::path workspace = scratch.path() / "workspace";
  std::unique_ptr<ca::HarnessWorker> worker;

  WorkerFixture() {
    ca::write_embedded_resources("harness/", harness);
    ca::detail::seal_tree(harness);
    ca::detail::make_open_directory(channel);
    ca::detail::make_open_directory(workspace);
    ca::SandboxOptions sandbox;
    sandbox.workspace = workspace;
    sandbox.mounts.push_back({harness, harness, ca::Mount::Access::read_only, false});
    sandbox.mounts.push_back({channel, channel, ca::Mount::Access::read_only, false});
    ca::hand_over_to_sandbox(workspace, sandbox);
    ca::HarnessWorkerOptions options;
    options.role = "reference";
    options.device = "cpu";
    options.python = CUDA_AGENT_PYTHON;
    options.harness_directory = harness;
    options.channel_directory = channel;
    options.scrub_directories = {"/tmp", "/dev/shm"};
    const ca::SandboxIdentity identity = ca::sandbox_identity(sandbox);
    if (::geteuid() == 0) options.owner = identity;
    worker = std::make_unique<ca::HarnessWorker>(ca::make_default_sandbox(sandbox), options);
  }

  ca::HarnessReply diagnose(nlohmann::json arguments, std::chrono::milliseconds timeout = 60s) {
    return worker->call("diagnose", arguments, timeout);
  }
};

}  // namespace

TEST_CASE("a harness worker serves each request in a forked child and reports how it ended", "[python][harness]") {
  WorkerFixture fixture;
  fixture.worker->start();
  const nlohmann::json ready = fixture.worker->ready_message();
  CHECK(ready["role"] == "reference");
  CHECK(ready["device"] == "cpu");
  CHECK_FALSE(ready["torch"].get<std::string>().empty());
  // Once the worker is ready, its channel is gone from the filesystem.
  CHECK_FALSE(fs::exists(fixture.channel / "requests"));
  CHECK_FALSE(fs::exists(fixture.channel / "replies"));

  const ca::HarnessReply ping = fixture.worker->call("ping", {{"echo", 42}}, 60s);
  REQUIRE(ping.has_result());
  CHECK(ping.result()["echo"] == 42);
  CHECK(ping.result()["cuda_initialized_before_fork"] == false);
  if (::geteuid() == 0) CHECK(ping.result()["uid"] != 0);

  {  // an exception is an error with its traceback
    const auto reply = fixture.diagnose({{"action", "raise"}, {"message", "on purpose"}});
    CHECK_FALSE(reply.has_result());
    CHECK(reply.error_text() == "RuntimeError: on purpose");
    CHECK(reply.exit_code() == 1);
  }
  {  // a crash is a signal
    const auto reply = fixture.diagnose({{"action", "crash"}});
    CHECK(reply.signal() == SIGSEGV);
    CHECK_FALSE(reply.has_result());
  }
  {  // a child past its deadline is killed
    const auto started = std::chrono::steady_clock::now();
    const auto reply = fixture.diagnose({{"action", "sleep"}, {"seconds", 600}}, 1500ms);
    CHECK(reply.timed_out());
    CHECK(reply.signal() == SIGKILL);
    CHECK(std::chrono::steady_clock::now() - started < 30s);
  }
  {  // processes a child leaves behind are killed and counted
    const auto reply = fixture.diagnose({{"action", "leave_process"}});
    CHECK(reply.has_result());
    CHECK(reply.stragglers() == 2);
  }
  {  // events arrive while the child runs, output is captured
    std::vector<nlohmann::json> events;
    const auto reply = fixture.worker->call("diagnose", {{"action", "event"}}, 60s,
                                            [&](const nlohmann::json& event) { events.push_back(event); });
    REQUIRE(events.size() == 1);
    CHECK(events[0]["progress"] == "halfway");
    const auto printed = fixture.diagnose({{"action", "output"}, {"bytes", 200000}});
    CHECK(printed.message["output_bytes"] == 200001);
    CHECK(printed.output().size() < 70000);
  }
  {  // files a request leaves in the private /tmp are gone for the next
    REQUIRE(fixture.diagnose({{"action", "write_file"}, {"path", "/tmp/left-behind"}}).has_result());
    const auto probe = fixture.diagnose({{"action", "probe"}, {"path", "/tmp/left-behind"}});
    CHECK(probe.result()["exists"] == false);
  }
  {  // the harness is read-only to the worker
    const auto probe =
        fixture.diagnose({{"action", "probe"}, {"path", (fixture.harness / "cuda_agent_harness").string()}});
    CHECK(probe.result()["readable"] == true);
    CHECK(probe.result()["writable"] == false);
  }
  {  // an unknown handler is an error naming the known ones
    const auto reply = fixture.worker->call("no_such_handler", nlohmann::json::object(), 60s);
    CHECK_THAT(reply.error_text(), Catch::Matchers::Contains("candidate"));
  }
  {  // a child that reported is ended at once, not awaited; settle waits for its exit
    const auto started = std::chrono::steady_clock::now();
    const auto reply =
        fixture.worker->call("diagnose_prepared", {{"action", "report_then_sleep"}, {"seconds", 60}}, 90s);
    CHECK(reply.has_result());
    CHECK(reply.message.value("ended_after_report", false));
    CHECK_FALSE(reply.signal());
    CHECK(reply.stragglers() == 0);
    CHECK(std::chrono::steady_clock::now() - started < 30s);
    CHECK(fixture.worker->settle(std::chrono::steady_clock::now() + 30s) >= 0.0);
  }
  // After every misbehaviour, the same worker still serves.
  const ca::HarnessReply again = fixture.worker->call("ping", nlohmann::json::object(), 60s);
  CHECK(again.has_result());
}

TEST_CASE("a harness worker that stops answering is restarted", "[python][harness]") {
  WorkerFixture fixture;
  const std::string id = fixture.worker->submit("diagnose", {{"action", "sleep"}, {"seconds", 600}}, 600s);
  CHECK_THROWS_AS(fixture.worker->wait(id, std::chrono::steady_clock::now() + 2s), ca::HarnessError);
  CHECK_FALSE(fixture.worker->running());
  const ca::HarnessReply reply = fixture.worker->call("ping", nlohmann::json::object(), 60s);
  CHECK(reply.has_result());
  CHECK(fixture.worker->running());
}

TEST_CASE("a harness worker that cannot start says why", "[python][harness]") {
  WorkerFixture fixture;
  ca::HarnessWorkerOptions options = fixture.worker->options();
  options.python = "/bin/false";
  options.startup_timeout = 30s;
  ca::SandboxOptions sandbox;
  sandbox.workspace = fixture.workspace;
  ca::HarnessWorker broken(ca::make_default_sandbox(sandbox), options);
  CHECK_THROWS_WITH(broken.start(), Catch::Matchers::Contains("did not start"));
}
