// SPDX-License-Identifier: Apache-2.0
// RayJobLauncher against a small stand-in for the Jobs REST API of Ray's dashboard on
// loopback: the bodies it sends (entrypoint quoted for the shell, the token in the job's
// environment and never on its command line, the resources), Ray's statuses read as launch
// states, and Ray's refusals, a dashboard that is not there and bad addresses reported with
// their reasons.
#include "catch.hpp"

#include <cuda_agent/server/ray_job_launcher.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace ca = cuda_agent;

namespace {

/// A stand-in for the Jobs API: keeps what it was sent, answers as the test says.
struct FakeJobs {
  std::mutex mutex;
  std::vector<nlohmann::json> submitted;
  std::vector<std::string> stopped;
  std::map<std::string, nlohmann::json> jobs;
  httplib::Server server;
  std::thread thread;
  int port = 0;

  FakeJobs() {
    server.Post("/api/jobs/", [this](const httplib::Request& request, httplib::Response& response) {
      const nlohmann::json body = nlohmann::json::parse(request.body);
      const std::lock_guard lock(mutex);
      submitted.push_back(body);
      const std::string id = body.at("submission_id");
      if (jobs.contains(id)) {
        response.status = 400;
        response.set_content(
            "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: Job with submission_id " + id +
                " already exists. Please use a different submission_id.\n",
            "text/plain");
        return;
      }
      jobs[id] = {{"status", "PENDING"}, {"message", "Job has not started yet."}};
      response.set_content(nlohmann::json({{"job_id", id}, {"submission_id", id}}).dump(), "application/json");
    });
    server.Get(R"(/api/jobs/([^/]+))", [this](const httplib::Request& request, httplib::Response& response) {
      const std::lock_guard lock(mutex);
      const auto job = jobs.find(request.matches[1]);
      if (job == jobs.end()) {
        response.status = 404;
        response.set_content("Job " + std::string(request.matches[1]) + " does not exist", "text/plain");
        return;
      }
      response.set_content(job->second.dump(), "application/json");
    });
    server.Post(R"(/api/jobs/([^/]+)/stop)", [this](const httplib::Request& request, httplib::Response& response) {
      const std::lock_guard lock(mutex);
      const std::string id = request.matches[1];
      if (!jobs.contains(id)) {
        response.status = 404;
        response.set_content("Job " + id + " does not exist", "text/plain");
        return;
      }
      stopped.push_back(id);
      jobs[id] = {{"status", "STOPPED"}, {"message", "Job was intentionally stopped."}};
      response.set_content(R"({"stopped": true})", "application/json");
    });
    server.Get("/api/version", [](const httplib::Request&, httplib::Response& response) {
      response.set_content(R"({"version": "4", "ray_version": "2.60.0"})", "application/json");
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    // Stopped before it listens, the server would listen on a closed socket for ever.
    while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeJobs() {
    server.stop();
    thread.join();
  }
  [[nodiscard]] std::string address() const { return "http://127.0.0.1:" + std::to_string(port); }
  void set(const std::string& id, const std::string& status, const std::string& message) {
    const std::lock_guard lock(mutex);
    jobs[id] = {{"status", status}, {"message", message}};
  }
};

ca::WorkerLaunch worker_launch(const std::string& name) {
  ca::WorkerLaunch launch;
  launch.name = name;
  launch.command = {"/opt/cuda agent/bin/cuda-agent", "worker", "--coordinator",
                    "http://10.0.0.1:8080",           "--name", "it's mine"};
  launch.environment = {{"CUDA_AGENT_WORKER_TOKEN", "token-0123456789abcdef"}};
  launch.gpus = 1;
  launch.cpus = 2.5;
  launch.labels = {{"coordinator", "http://10.0.0.1:8080"}};
  return launch;
}

}  // namespace

TEST_CASE("RayJobLauncher submits a job with its entrypoint, resources, environment and metadata") {
  FakeJobs ray;
  ca::RayJobLauncher launcher({ray.address()});
  CHECK(launcher.describe() == "Ray at " + ray.address());
  CHECK(launcher.version() == "2.60.0");
  CHECK(launcher.submit(worker_launch("cuda-agent-worker-a1-0-0")) == "cuda-agent-worker-a1-0-0");

  const std::lock_guard lock(ray.mutex);
  REQUIRE(ray.submitted.size() == 1);
  const nlohmann::json& body = ray.submitted[0];
  CHECK(body["submission_id"] == "cuda-agent-worker-a1-0-0");
  CHECK(body["entrypoint"] ==
        "exec '/opt/cuda agent/bin/cuda-agent' worker --coordinator http://10.0.0.1:8080 --name 'it'\\''s mine'");
  CHECK(body["entrypoint"].get<std::string>().find("token-0123456789abcdef") == std::string::npos);
  CHECK(body["runtime_env"]["env_vars"]["CUDA_AGENT_WORKER_TOKEN"] == "token-0123456789abcdef");
  CHECK(body["entrypoint_num_gpus"] == 1.0);
  CHECK(body["entrypoint_num_cpus"] == 2.5);
  CHECK(body["metadata"]["coordinator"] == "http://10.0.0.1:8080");
}

TEST_CASE("RayJobLauncher leaves out the resources a launch does not reserve") {
  FakeJobs ray;
  ca::RayJobLauncher launcher({ray.address()});
  ca::WorkerLaunch launch = worker_launch("cpu-only");
  launch.gpus = 0;
  launch.cpus = 0;
  (void)launcher.submit(launch);
  const std::lock_guard lock(ray.mutex);
  CHECK(!ray.submitted.at(0).contains("entrypoint_num_gpus"));
  CHECK(!ray.submitted.at(0).contains("entrypoint_num_cpus"));
}

TEST_CASE("RayJobLauncher reads Ray's job statuses as launch states, with Ray's message") {
  FakeJobs ray;
  ca::RayJobLauncher launcher({ray.address()});
  const std::string job = launcher.submit(worker_launch("job-1"));
  ca::LaunchStatus status = launcher.status(job);
  CHECK(status.state == ca::LaunchState::pending);
  CHECK(status.message == "PENDING (Job has not started yet.)");
  ray.set(job, "RUNNING", "Job is currently running.");
  CHECK(launcher.status(job).state == ca::LaunchState::running);
  for (const char* ended : {"SUCCEEDED", "FAILED", "STOPPED"}) {
    ray.set(job, ended, "Job entrypoint command failed with exit code -9");
    status = launcher.status(job);
    CHECK(status.state == ca::LaunchState::ended);
    CHECK(status.message == std::string(ended) + " (Job entrypoint command failed with exit code -9)");
  }
  ray.set(job, "FAILED", "Job entrypoint command failed with exit code -9, last available logs (truncated):\nline");
  CHECK(launcher.status(job).message == "FAILED (Job entrypoint command failed with exit code -9)");
  ray.set(job, "DANCING", "");
  CHECK_THROWS_WITH(launcher.status(job), Catch::Contains("'DANCING', a status this launcher does not know"));
  // A job the cluster does not know (restarted since) has ended, as far as a fleet goes.
  status = launcher.status("never-submitted");
  CHECK(status.state == ca::LaunchState::ended);
  CHECK(status.message.find("Ray knows no job never-submitted") != std::string::npos);
}

TEST_CASE("RayJobLauncher stops a job, and a job Ray does not know is no error") {
  FakeJobs ray;
  ca::RayJobLauncher launcher({ray.address()});
  const std::string job = launcher.submit(worker_launch("job-2"));
  launcher.stop(job);
  CHECK(launcher.status(job).message == "STOPPED (Job was intentionally stopped.)");
  CHECK_NOTHROW(launcher.stop("gone"));
  const std::lock_guard lock(ray.mutex);
  CHECK(ray.stopped == std::vector<std::string>{"job-2"});
}

TEST_CASE("RayJobLauncher reports Ray's refusal with the reason from its traceback") {
  FakeJobs ray;
  ca::RayJobLauncher launcher({ray.address()});
  (void)launcher.submit(worker_launch("twice"));
  CHECK_THROWS_WITH(launcher.submit(worker_launch("twice")),
                    Catch::Contains("answered 400 to POST /api/jobs/: ValueError: Job with submission_id twice "
                                    "already exists"));
}

TEST_CASE("RayJobLauncher says so where no dashboard answers, and refuses bad addresses and names") {
  ca::RayJobLauncherOptions options;
  options.address = "http://127.0.0.1:1";  // a privileged port nothing listens on
  ca::RayJobLauncher absent(options);
  CHECK_THROWS_WITH(
      absent.submit(worker_launch("x")),
      Catch::Contains("cannot reach Ray's dashboard at " + options.address) && Catch::Contains("is the cluster up"));
  CHECK_THROWS_AS(absent.status("x"), std::runtime_error);

  CHECK_THROWS_WITH(ca::RayJobLauncher({"127.0.0.1:8265"}), Catch::Contains("must start with http://"));
  CHECK_THROWS_WITH(ca::RayJobLauncher({"http://127.0.0.1:8265/ray"}), Catch::Contains("without a path"));
  CHECK_THROWS_WITH(ca::RayJobLauncher({"http://"}), Catch::Contains("without a path"));
  CHECK_NOTHROW(ca::RayJobLauncher({"http://127.0.0.1:8265/"}));

  FakeJobs ray;
  ca::RayJobLauncher launcher({ray.address()});
  CHECK_THROWS_AS(launcher.submit(worker_launch("no/slashes")), std::invalid_argument);
  CHECK_THROWS_AS(launcher.status("../api"), std::invalid_argument);
  ca::WorkerLaunch empty = worker_launch("empty");
  empty.command.clear();
  CHECK_THROWS_WITH(launcher.submit(empty), Catch::Contains("has no command"));
}
