// SPDX-License-Identifier: Apache-2.0
// The service's journal: lines written in order under the caller's lock and synced outside
// it, by one sync for whoever waits together; compaction while others sync; lines cut short.
#include "catch.hpp"

#include <cuda_agent/service/detail/journal.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuda_agent;

namespace {

struct JournalDirectory {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("cuda-agent-journal-test-" + std::to_string(std::random_device{}()));
  JournalDirectory() { std::filesystem::create_directories(path); }
  ~JournalDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

TEST_CASE("journal lines written by many threads are all read back, in the order of their sequence numbers") {
  const JournalDirectory directory;
  const std::filesystem::path file = directory.path / "journal.jsonl";
  ca::detail::Journal journal(file);
  std::mutex order;  // the service's lock: writes never overlap
  constexpr int threads = 8, lines = 50;
  std::vector<std::thread> writers;
  for (int t = 0; t < threads; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < lines; ++i) {
        std::uint64_t sequence = 0;
        {
          const std::lock_guard lock(order);
          sequence = journal.write({{"thread", t}, {"line", i}});
        }
        journal.sync_through(sequence);  // outside the lock, as submitters do
      }
    });
  for (std::thread& writer : writers) writer.join();
  const std::vector<nlohmann::json> records = ca::detail::Journal::read(file);
  REQUIRE(records.size() == static_cast<std::size_t>(threads * lines));
  std::vector<int> next(threads, 0);
  for (const nlohmann::json& record : records) {
    const int t = record["thread"];
    CHECK(record["line"] == next[static_cast<std::size_t>(t)]++);  // each thread's lines in its order
  }
}

TEST_CASE("a journal compacted while others sync keeps what it was given and appends after it") {
  const JournalDirectory directory;
  const std::filesystem::path file = directory.path / "journal.jsonl";
  ca::detail::Journal journal(file);
  for (int i = 0; i < 10; ++i) journal.append({{"old", i}});
  std::thread syncing([&] {
    for (std::uint64_t i = 1; i <= 200; ++i) journal.sync_through(i % 10 + 1);
  });
  journal.rewrite({{{"kept", 1}}, {{"kept", 2}}});
  syncing.join();
  const std::uint64_t sequence = journal.write({{"new", 3}});
  CHECK(sequence == 11);  // numbering goes on across the compaction
  journal.sync_through(sequence);
  const std::vector<nlohmann::json> records = ca::detail::Journal::read(file);
  REQUIRE(records.size() == 3);
  CHECK(records[0] == nlohmann::json{{"kept", 1}});
  CHECK(records[2] == nlohmann::json{{"new", 3}});
}

TEST_CASE("a journal line cut short by a crash is skipped on reading, the lines before it kept") {
  const JournalDirectory directory;
  const std::filesystem::path file = directory.path / "journal.jsonl";
  {
    ca::detail::Journal journal(file);
    journal.append({{"id", "ev-1"}});
    journal.append({{"id", "ev-2"}});
  }
  std::ofstream(file, std::ios::app) << R"({"id": "ev-3", "requ)";
  const std::vector<nlohmann::json> records = ca::detail::Journal::read(file);
  REQUIRE(records.size() == 2);
  CHECK(records[1]["id"] == "ev-2");
}
