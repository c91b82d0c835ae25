// SPDX-License-Identifier: Apache-2.0
// The samples of a benchmark folder and the tasks they answer, by KernelBench's names.
#include "catch.hpp"

#include <cuda_agent/bench/generation_set.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>  // getpid

namespace ca = cuda_agent;
namespace fs = std::filesystem;

namespace {

struct Folder {
  fs::path path = fs::temp_directory_path() / ("cuda-agent-generation-set-" + std::to_string(::getpid()));
  Folder() { fs::create_directories(path); }
  ~Folder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  void file(const std::string& name) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << "# " << name << "\n";
  }
};

}  // namespace

TEST_CASE("sample names are KernelBench's, whole and nothing else") {
  const auto key = ca::parse_sample_name("level_2_problem_17_sample_3_kernel.py", "_kernel.py");
  REQUIRE(key);
  CHECK(key->level == 2);
  CHECK(key->problem == 17);
  CHECK(key->sample == 3);
  CHECK(key->name() == "level_2_problem_17_sample_3");
  CHECK(ca::parse_sample_name("level_2_problem_17_sample_3", ""));
  CHECK_FALSE(ca::parse_sample_name("level_2_problem_17_sample_3_kernel.py.bak", "_kernel.py"));
  CHECK_FALSE(ca::parse_sample_name("level_2_problem_x_sample_3_kernel.py", "_kernel.py"));
  CHECK_FALSE(ca::parse_sample_name("level_-2_problem_1_sample_3_kernel.py", "_kernel.py"));
  CHECK_FALSE(ca::parse_sample_name("level_2_problem_17_kernel.py", "_kernel.py"));
}

TEST_CASE("a folder's samples come in level, problem and sample order; the rest is listed as left out") {
  const Folder folder;
  folder.file("level_1_problem_10_sample_0_kernel.py");
  folder.file("level_1_problem_9_sample_1_kernel.py");
  folder.file("level_1_problem_9_sample_0/model_new.py");
  folder.file("level_2_problem_1_sample_0_kernel.py");
  folder.file("notes.txt");
  folder.file("level_1_problem_3_sample_0.py");
  fs::create_symlink(folder.path / "level_2_problem_1_sample_0_kernel.py",
                     folder.path / "level_2_problem_2_sample_0_kernel.py");
  const ca::GenerationSet set = ca::find_generations(folder.path);
  REQUIRE(set.samples.size() == 4);
  CHECK(set.samples[0].key.name() == "level_1_problem_9_sample_0");
  CHECK(set.samples[0].is_directory);
  CHECK(set.samples[1].key.name() == "level_1_problem_9_sample_1");
  CHECK_FALSE(set.samples[1].is_directory);
  CHECK(set.samples[2].key.name() == "level_1_problem_10_sample_0");
  CHECK(set.samples[3].key.level == 2);
  CHECK(set.ignored ==
        std::vector<std::string>{"level_1_problem_3_sample_0.py", "level_2_problem_2_sample_0_kernel.py", "notes.txt"});
}

TEST_CASE("one sample as a file and a directory is refused; an unreadable folder throws") {
  const Folder folder;
  folder.file("level_1_problem_1_sample_0_kernel.py");
  folder.file("level_1_problem_1_sample_0/model_new.py");
  CHECK_THROWS_WITH(ca::find_generations(folder.path), Catch::Contains("twice"));
  CHECK_THROWS_AS(ca::find_generations(folder.path / "absent"), std::runtime_error);
}

TEST_CASE("KernelBench's task files are indexed by level and problem") {
  const auto tasks = ca::index_kernelbench_tasks(fs::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "data" / "kernelbench");
  REQUIRE(tasks.contains({1, 19}));
  CHECK(tasks.at({1, 19}).filename() == "19_ReLU.py");
  CHECK(tasks.contains({2, 14}));
  for (const auto& [key, file] : tasks) {
    CHECK(file.extension() == ".py");
    CHECK(file.parent_path().filename() == "level" + std::to_string(key.first));
  }
  CHECK_FALSE(tasks.contains({1, 0}));
}
