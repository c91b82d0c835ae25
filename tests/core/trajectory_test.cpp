// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/trajectory.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>

namespace ca = cuda_agent;

namespace {
std::filesystem::path fresh_file(const std::string& name) {
  const auto directory =
      std::filesystem::temp_directory_path() / ("cuda-agent-trajectory-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const auto path = directory / name;
  std::filesystem::remove(path);
  return path;
}
}  // namespace

TEST_CASE("trajectory events are appended as numbered lines and read back", "[trajectory]") {
  const auto path = fresh_file("basic.jsonl");
  {
    ca::TrajectoryWriter writer(path);
    writer.append(ca::trajectory_event::header({{"name", "level1/19_ReLU"}}, "scripted"));
    writer.append(ca::trajectory_event::message(0, ca::Message::user("optimize")));
    ca::ChatResponse response;
    response.message = ca::Message::assistant("", {ca::ToolCall::from_raw("c1", "Bash", R"({"command":"ls"})")});
    response.finish_reason = ca::FinishReason::tool_calls;
    response.usage.prompt_tokens = 12;
    writer.append(ca::trajectory_event::assistant(1, response, 5.0));
    CHECK_THROWS_AS(writer.append(nlohmann::json::array()), std::invalid_argument);
  }
  const auto events = ca::TrajectoryWriter::read_events(path);
  REQUIRE(events.size() == 3);
  CHECK(events[0]["type"] == "header");
  CHECK(events[0]["format"] == ca::trajectory_format_version);
  CHECK(events[2]["seq"] == 2);
  CHECK(events[2]["finish_reason"] == "tool_calls");
  CHECK(events[2]["usage"]["prompt_tokens"] == 12);
  CHECK(events[1]["time"].is_number());

  const auto messages = ca::conversation(events);
  REQUIRE(messages.size() == 2);
  CHECK(messages[1].tool_calls.at(0).name == "Bash");
}

TEST_CASE("a torn last line is skipped and numbering resumes after the last event", "[trajectory]") {
  const auto path = fresh_file("torn.jsonl");
  {
    ca::TrajectoryWriter writer(path);
    writer.append({{"type", "note"}, {"text", "one"}});
    writer.append({{"type", "note"}, {"text", "two"}});
  }
  std::ofstream(path, std::ios::app) << R"({"type":"message","turn":3,"mess)";  // killed mid-write

  bool torn = false;
  CHECK(ca::TrajectoryWriter::read_events(path, &torn).size() == 2);
  CHECK(torn);
  {
    ca::TrajectoryWriter resumed(path);
    resumed.append({{"type", "note"}, {"text", "three"}});
  }
  const auto events = ca::TrajectoryWriter::read_events(path, &torn);
  REQUIRE(events.size() == 3);
  CHECK(events[2]["seq"] == 2);
  CHECK(events[2]["text"] == "three");
  CHECK_FALSE(torn);
}

TEST_CASE("damage before the last line is an error", "[trajectory]") {
  const auto path = fresh_file("damaged.jsonl");
  std::ofstream(path) << "{\"type\":\"note\",\"seq\":0}\nnot json\n{\"type\":\"note\",\"seq\":1}\n";
  CHECK_THROWS_WITH(ca::TrajectoryWriter::read_events(path), Catch::Matchers::Contains(":2: not a JSON event"));
}
