// SPDX-License-Identifier: Apache-2.0
// Workers kept alive through an engine (WorkerFleet over a WorkerLauncher), with a fake
// engine the test drives: the first jobs submitted as asked, an ended job replaced after a
// back-off, a refused submission tried again, replacements capped per time window, the job
// of a quarantined worker stopped and replaced within that cap, an engine that cannot be
// reached at the start refused with its reason, and stop stopping every job.
#include "catch.hpp"

#include <cuda_agent/service/worker_launcher.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuda_agent;
using namespace std::chrono_literals;

namespace {

/// What the fake engine was asked, and what the test tells it to do next.
struct Books {
  std::mutex mutex;
  std::vector<ca::WorkerLaunch> submitted;
  std::map<std::string, ca::LaunchStatus> jobs;
  std::vector<std::string> stopped;
  int refusals_left = 0;
  int refuse_after = -1;  // >= 0: submissions beyond this many are refused
  bool unreachable = false;
  bool stop_ends_jobs = true;
};

struct FakeEngine {
  std::shared_ptr<Books> books;

  std::string submit(const ca::WorkerLaunch& launch) {
    const std::lock_guard lock(books->mutex);
    if (books->refusals_left > 0) {
      --books->refusals_left;
      throw std::runtime_error("no resources for " + launch.name);
    }
    if (books->refuse_after >= 0 && static_cast<int>(books->submitted.size()) >= books->refuse_after)
      throw std::runtime_error("the cluster is full");
    books->submitted.push_back(launch);
    const std::string job = "job-" + launch.name;
    books->jobs[job] = {ca::LaunchState::running, "RUNNING"};
    return job;
  }
  ca::LaunchStatus status(const std::string& job) {
    const std::lock_guard lock(books->mutex);
    if (books->unreachable) throw std::runtime_error("connection refused");
    return books->jobs.at(job);
  }
  void stop(const std::string& job) {
    const std::lock_guard lock(books->mutex);
    books->stopped.push_back(job);
    if (books->stop_ends_jobs) books->jobs[job] = {ca::LaunchState::ended, "STOPPED"};
  }
  [[nodiscard]] std::string describe() const { return "a fake engine"; }
};

static_assert(ca::WorkerLauncher<FakeEngine>);

ca::WorkerFleetOptions quick_options(std::size_t workers) {
  ca::WorkerFleetOptions options;
  options.workers = workers;
  options.make_launch = [](std::size_t index, std::size_t attempt) {
    ca::WorkerLaunch launch;
    launch.name = "w" + std::to_string(index) + "-" + std::to_string(attempt);
    launch.command = {"/bin/worker", "--index", std::to_string(index)};
    launch.environment = {{"CUDA_AGENT_WORKER_TOKEN", "secret"}};
    launch.gpus = 1;
    return launch;
  };
  options.poll_interval = 5ms;
  options.retry_first = 20ms;
  options.retry_last = 80ms;
  options.stop_wait = 2s;
  return options;
}

template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds within = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

void end_job(Books& books, const std::string& job, const std::string& message) {
  const std::lock_guard lock(books.mutex);
  books.jobs.at(job) = {ca::LaunchState::ended, message};
}

std::size_t submissions(Books& books) {
  const std::lock_guard lock(books.mutex);
  return books.submitted.size();
}

}  // namespace

TEST_CASE("a fleet submits its workers' jobs, reports them, and stop stops every one") {
  auto books = std::make_shared<Books>();
  ca::WorkerFleet fleet(FakeEngine{books}, quick_options(3));
  fleet.start();
  {
    const std::lock_guard lock(books->mutex);
    REQUIRE(books->submitted.size() == 3);
    CHECK(books->submitted[0].name == "w0-0");
    CHECK(books->submitted[2].command == std::vector<std::string>{"/bin/worker", "--index", "2"});
    CHECK(books->submitted[1].environment.at("CUDA_AGENT_WORKER_TOKEN") == "secret");
    CHECK(books->submitted[1].gpus == 1);
  }
  REQUIRE(eventually([&] { return fleet.status()["running"] == 3; }));
  nlohmann::json status = fleet.status();
  CHECK(status["engine"] == "a fake engine");
  CHECK(status["workers"] == 3);
  CHECK(status["jobs"][1]["job"] == "job-w1-0");
  CHECK(status["jobs"][1]["state"] == "running");
  CHECK(status["gave_up"].is_null());
  CHECK(status["stopped"] == false);

  fleet.stop();
  status = fleet.status();
  CHECK(status["stopped"] == true);
  CHECK(status["running"] == 0);
  for (const auto& job : status["jobs"]) {
    CHECK(job["state"] == "ended");
    CHECK(job["message"] == "STOPPED");
  }
  {
    const std::lock_guard lock(books->mutex);
    CHECK(books->stopped == std::vector<std::string>{"job-w0-0", "job-w1-0", "job-w2-0"});
  }
  fleet.stop();  // again: nothing more
  const std::lock_guard lock(books->mutex);
  CHECK(books->stopped.size() == 3);
  CHECK(books->submitted.size() == 3);
}

TEST_CASE("a fleet whose engine refuses a first job does not start, and stops the jobs it had submitted") {
  auto books = std::make_shared<Books>();
  books->refuse_after = 1;
  ca::WorkerFleet fleet(FakeEngine{books}, quick_options(2));
  try {
    fleet.start();
    FAIL("start did not throw");
  } catch (const std::runtime_error& error) {
    const std::string what = error.what();
    CHECK(what.find("cannot start worker jobs on a fake engine") != std::string::npos);
    CHECK(what.find("the cluster is full") != std::string::npos);
  }
  const std::lock_guard lock(books->mutex);
  CHECK(books->stopped == std::vector<std::string>{"job-w0-0"});
}

TEST_CASE("a job that ends without being stopped is replaced, after a back-off, by a launch of its own") {
  auto books = std::make_shared<Books>();
  std::vector<std::string> notices;
  std::mutex notices_mutex;
  ca::WorkerFleetOptions options = quick_options(2);
  options.retry_first = 150ms;
  options.on_notice = [&](const std::string& line) {
    const std::lock_guard lock(notices_mutex);
    notices.push_back(line);
  };
  ca::WorkerFleet fleet(FakeEngine{books}, options);
  fleet.start();
  REQUIRE(eventually([&] { return fleet.status()["running"] == 2; }));

  end_job(*books, "job-w1-0", "FAILED: exit code -9");
  const auto ended = std::chrono::steady_clock::now();
  REQUIRE(eventually([&] { return submissions(*books) == 3; }));
  CHECK(std::chrono::steady_clock::now() - ended >= 140ms);  // the back-off
  {
    const std::lock_guard lock(books->mutex);
    CHECK(books->submitted[2].name == "w1-1");
    CHECK(books->stopped.empty());  // an ended job is not stopped again
  }
  REQUIRE(eventually([&] { return fleet.status()["jobs"][1]["job"] == "job-w1-1"; }));
  const nlohmann::json status = fleet.status();
  CHECK(status["replacements"] == 1);
  CHECK(status["jobs"][1]["submissions"] == 2);
  CHECK(status["jobs"][0]["job"] == "job-w0-0");
  {
    const std::lock_guard lock(notices_mutex);
    REQUIRE(!notices.empty());
    CHECK(notices.front().find("job-w1-0 ended (FAILED: exit code -9)") != std::string::npos);
  }
  fleet.stop();
  const std::lock_guard lock(books->mutex);
  CHECK(books->stopped == std::vector<std::string>{"job-w0-0", "job-w1-1"});
}

TEST_CASE("a replacement the engine refuses is tried again with back-off, the reason shown meanwhile") {
  auto books = std::make_shared<Books>();
  ca::WorkerFleetOptions options = quick_options(1);
  options.retry_first = 30ms;
  options.retry_last = 30ms;
  ca::WorkerFleet fleet(FakeEngine{books}, options);
  fleet.start();
  {
    const std::lock_guard lock(books->mutex);
    books->refusals_left = 3;
  }
  end_job(*books, "job-w0-0", "FAILED");
  REQUIRE(eventually([&] {
    return fleet.status()["jobs"][0]["message"].get<std::string>().find("refused the job: no resources for w0-1") !=
           std::string::npos;
  }));
  REQUIRE(eventually([&] { return submissions(*books) == 2; }));
  const std::lock_guard lock(books->mutex);
  CHECK(books->refusals_left == 0);
  CHECK(books->submitted[1].name == "w0-1");  // refused submissions use no name up
}

TEST_CASE("replacements beyond the cap within the window make the fleet give up; what runs is kept") {
  auto books = std::make_shared<Books>();
  ca::WorkerFleetOptions options = quick_options(2);
  options.retry_first = 1ms;
  options.retry_last = 1ms;
  options.max_restarts = 2;
  options.restart_window = 60s;
  ca::WorkerFleet fleet(FakeEngine{books}, options);
  fleet.start();
  // Worker 0 crashes each time it starts.
  for (int crash = 0; crash < 3; ++crash) {
    const std::string job = "job-w0-" + std::to_string(crash);
    REQUIRE(eventually([&] {
      const std::lock_guard lock(books->mutex);
      return books->jobs.contains(job);
    }));
    end_job(*books, job, "FAILED: exit code 1 (crash " + std::to_string(crash) + ")");
  }
  REQUIRE(eventually([&] { return !fleet.status()["gave_up"].is_null(); }));
  std::this_thread::sleep_for(50ms);
  const nlohmann::json status = fleet.status();
  CHECK(status["replacements"] == 2);
  CHECK(status["gave_up"].get<std::string>().find("2 replacements within 60 s") != std::string::npos);
  CHECK(status["gave_up"].get<std::string>().find("crash 2") != std::string::npos);
  CHECK(status["jobs"][0]["state"] == "ended");
  CHECK(status["jobs"][1]["state"] == "running");
  CHECK(submissions(*books) == 4);  // two first jobs, two replacements

  fleet.stop();
  const std::lock_guard lock(books->mutex);
  CHECK(books->stopped == std::vector<std::string>{"job-w1-0"});
}

TEST_CASE("a job whose worker was quarantined is stopped and replaced, within the cap on replacements") {
  auto books = std::make_shared<Books>();
  ca::WorkerFleetOptions options = quick_options(2);
  options.max_restarts = 1;
  options.restart_window = 60s;
  ca::WorkerFleet fleet(FakeEngine{books}, options);
  fleet.start();
  REQUIRE(eventually([&] { return fleet.status()["running"] == 2; }));
  CHECK(fleet.status()["jobs"][1]["name"] == "w1-0");
  CHECK_FALSE(fleet.replace("w7-0", "quarantined"));  // no job of this fleet

  CHECK(fleet.replace("w1-0", "quarantined: 3 infrastructure errors in a row"));
  REQUIRE(eventually([&] { return submissions(*books) == 3; }));
  {
    const std::lock_guard lock(books->mutex);
    CHECK(books->stopped == std::vector<std::string>{"job-w1-0"});
    CHECK(books->submitted[2].name == "w1-1");
  }
  REQUIRE(eventually([&] { return fleet.status()["jobs"][1]["state"] == "running"; }));
  nlohmann::json status = fleet.status();
  CHECK(status["replacements"] == 1);
  CHECK(status["jobs"][1]["name"] == "w1-1");
  CHECK(status["jobs"][1]["job"] == "job-w1-1");

  // Beyond the cap: the fleet gives up replacing, and keeps the job (its worker takes no work).
  CHECK(fleet.replace("w0-0", "quarantined: no CUDA device"));
  REQUIRE(eventually([&] { return !fleet.status()["gave_up"].is_null(); }));
  status = fleet.status();
  CHECK(status["gave_up"].get<std::string>().find("the last was replaced: quarantined: no CUDA device") !=
        std::string::npos);
  CHECK(status["jobs"][0]["state"] == "running");
  CHECK(submissions(*books) == 3);
  fleet.stop();
  const std::lock_guard lock(books->mutex);
  CHECK(books->stopped == std::vector<std::string>{"job-w1-0", "job-w0-0", "job-w1-1"});
}

TEST_CASE("an engine that cannot say how a job stands does not get it replaced") {
  auto books = std::make_shared<Books>();
  ca::WorkerFleetOptions options = quick_options(1);
  options.stop_wait = 300ms;
  ca::WorkerFleet fleet(FakeEngine{books}, options);
  fleet.start();
  {
    const std::lock_guard lock(books->mutex);
    books->unreachable = true;
  }
  REQUIRE(eventually([&] {
    return fleet.status()["jobs"][0]["message"].get<std::string>().find("connection refused") != std::string::npos;
  }));
  CHECK(submissions(*books) == 1);
  {
    const std::lock_guard lock(books->mutex);
    books->unreachable = false;
    books->stop_ends_jobs = false;  // and then one that never reports the stop done
  }
  const auto asked = std::chrono::steady_clock::now();
  fleet.stop();
  CHECK(std::chrono::steady_clock::now() - asked >= 290ms);  // waited stop_wait, then gave up waiting
  CHECK(fleet.status()["jobs"][0]["state"] == "running");
}

TEST_CASE("a fleet needs workers and a way to launch them") {
  auto books = std::make_shared<Books>();
  ca::WorkerFleetOptions none = quick_options(0);
  CHECK_THROWS_AS(ca::WorkerFleet(FakeEngine{books}, none), std::invalid_argument);
  ca::WorkerFleetOptions no_launch = quick_options(1);
  no_launch.make_launch = nullptr;
  CHECK_THROWS_AS(ca::WorkerFleet(FakeEngine{books}, no_launch), std::invalid_argument);
}

namespace {

/// A fake engine that starts workers together (as Slurm's job arrays do), and counts how.
struct BatchEngine : FakeEngine {
  std::shared_ptr<std::vector<std::size_t>> batches = std::make_shared<std::vector<std::size_t>>();

  std::vector<std::string> submit_all(std::span<const ca::WorkerLaunch> launches) {
    batches->push_back(launches.size());
    std::vector<std::string> jobs;
    for (const ca::WorkerLaunch& launch : launches) jobs.push_back(submit(launch));
    return jobs;
  }
};

static_assert(ca::BatchWorkerLauncher<BatchEngine>);
static_assert(!ca::BatchWorkerLauncher<FakeEngine>);

}  // namespace

TEST_CASE("a fleet starts its workers in one submission where the engine has one, and replaces them one by one") {
  auto books = std::make_shared<Books>();
  BatchEngine engine{{books}};
  const auto batches = engine.batches;
  ca::WorkerFleet fleet(engine, quick_options(3));
  fleet.start();
  CHECK(*batches == std::vector<std::size_t>{3});
  REQUIRE(eventually([&] { return fleet.status()["running"] == 3; }));
  end_job(*books, "job-w1-0", "FAILED");
  REQUIRE(eventually([&] { return submissions(*books) == 4; }));
  CHECK(*batches == std::vector<std::size_t>{3});  // the replacement went through submit()
  fleet.stop();
}
