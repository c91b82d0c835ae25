// SPDX-License-Identifier: Apache-2.0
// The tooling around the hand-written GPU candidates, checked without a GPU: the manifest
// agrees with the candidate directories and the candidate contract, the CPU emulation of every
// kernel matches the reference while its broken variants are rejected, and run_all.sh turns
// `cuda-agent eval` results into the right table, summary files and exit status (driven by a
// stand-in for the binary).
#include "catch.hpp"

#include <cuda_agent/process.hpp>

#include <algorithm>   // count
#include <chrono>      // minutes, steady_clock
#include <filesystem>  // path, copy, create_directories, permissions, remove_all
#include <fstream>     // ifstream, ofstream
#include <iterator>    // istreambuf_iterator
#include <map>         // map
#include <set>         // set
#include <sstream>     // istringstream
#include <string>      // string, to_string, getline
#include <vector>      // vector

#include <unistd.h>  // getpid

namespace ca = cuda_agent;
using namespace std::chrono_literals;

namespace {

const std::filesystem::path candidates_directory =
    std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "gpu_candidates";

class Scratch {
 public:
  Scratch() {
    path_ = std::filesystem::temp_directory_path() /
            ("cuda-agent-gpu-candidates-" + std::to_string(::getpid()) + "-" +
             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(path_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string read_text(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

// Every file of a candidate directory by its relative path, with its contents.
/// The progress line run_all.sh printed when `task`'s `variant` finished, or empty.
std::string progress_line(const std::string& output, const std::string& task, const std::string& variant) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string done, named, kind;
    if (words >> done >> named >> kind && done == "done" && named == task && kind == variant) return line;
  }
  return {};
}

std::map<std::string, std::string> source_files(const std::filesystem::path& directory) {
  std::map<std::string, std::string> files;
  if (!std::filesystem::is_directory(directory)) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory))
    if (entry.is_regular_file() && entry.path().string().find("__pycache__") == std::string::npos)
      files[std::filesystem::relative(entry.path(), directory).string()] = read_text(entry.path());
  return files;
}

ca::ProcessResult run(std::vector<std::string> argv, ca::Environment environment = {},
                      std::chrono::milliseconds timeout = std::chrono::minutes(10)) {
  ca::ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.environment = std::move(environment);
  if (!spec.environment.get("PATH")) spec.environment.set("PATH", "/usr/local/bin:/usr/bin:/bin");
  spec.merge_stderr = true;
  spec.timeout = timeout;
  return ca::run_process(spec);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A stand-in for `cuda-agent eval TASK CANDIDATE --device cuda --json OUT`: accepts every
// correct/ candidate and rejects every broken one with value_mismatch, except the variants
// named in ACCEPT_VARIANTS (accepted) and CRASH_VARIANTS (no JSON written, exit status 3).
const char* const fake_cuda_agent = R"(#!/bin/bash
[ "$1" = eval ] || exit 2
candidate="$3"; shift 3
while [ $# -gt 0 ]; do case "$1" in --json) out="$2"; shift 2;; *) shift;; esac; done
variant="${candidate##*/}"; task="${candidate%/*}"; name="${task##*/}/$variant"
for crash in $CRASH_VARIANTS; do [ "$crash" = "$name" ] && exit 3; done
accept=0
[ "$variant" = correct ] && accept=1
for each in $ACCEPT_VARIANTS; do [ "$each" = "$name" ] && accept=1; done
if [ $accept = 1 ]; then
  echo '{"correct": true, "compile": {"succeeded": true}, "verification": {"correct": true, "rejection": null}}' > "$out"
else
  echo '{"correct": false, "compile": {"succeeded": true}, "verification": {"correct": false, "rejection": {"reason": "value_mismatch", "message": "output 0 differs at (0, 1): expected 0.5, got 0.25"}}}' > "$out"
fi
)";

}  // namespace

TEST_CASE("the manifest names 23 tasks whose candidates and task files exist", "[gpu_candidates]") {
  std::ifstream manifest(candidates_directory / "manifest.tsv");
  REQUIRE(manifest.good());
  std::set<std::string> tasks;
  std::set<std::string> levels;
  std::set<std::string> level3_tasks;
  std::string line;
  while (std::getline(manifest, line)) {
    if (line.empty() || line.front() == '#') continue;
    std::istringstream fields(line);
    std::string task, variant, weight, detection, bug_kind;
    std::getline(fields, task, '\t');
    std::getline(fields, variant, '\t');
    std::getline(fields, weight, '\t');
    std::getline(fields, detection, '\t');
    std::getline(fields, bug_kind, '\t');
    INFO(line);
    CHECK(variant.rfind("broken", 0) == 0);
    CHECK_FALSE(bug_kind.empty());
    // Each broken variant is a different program from its correct twin.
    CHECK(source_files(candidates_directory / task / variant) != source_files(candidates_directory / task / "correct"));
    const std::string level = task.substr(0, task.find('/'));
    const std::string stem = task.substr(task.find('/') + 1);
    CHECK(std::filesystem::is_regular_file(std::filesystem::path(CUDA_AGENT_TEST_DATA_DIR) / "kernelbench" / level /
                                           (stem + ".py")));
    for (const std::string& candidate : {std::string("correct"), variant}) {
      CHECK(std::filesystem::is_regular_file(candidates_directory / task / candidate / "model_new.py"));
      CHECK(std::filesystem::is_regular_file(candidates_directory / task / candidate / "kernels" / "binding.cpp"));
    }
    tasks.insert(task);
    levels.insert(level);
    if (level == "level3") level3_tasks.insert(task);
  }
  CHECK(tasks.size() == 23);
  CHECK(levels == std::set<std::string>{"level1", "level2", "level3"});
  CHECK(level3_tasks.size() >= 3);
}

TEST_CASE("every GPU candidate is named by the manifest and each broken variant is a minimal change", "[python]") {
  const auto checked = run({CUDA_AGENT_PYTHON, (candidates_directory / "check_layout.py").string()});
  INFO(checked.standard_output.text);
  REQUIRE(checked.succeeded());
  CHECK_THAT(checked.standard_output.text, Catch::Matchers::Contains("23 tasks, 25 broken variants: ok"));

  // A copy whose broken variant rewrites the kernel, with a stray variant next to it.
  Scratch scratch;
  const std::filesystem::path copy = scratch.path() / "candidates";
  std::filesystem::create_directories(copy / "level1");
  std::filesystem::copy(candidates_directory / "level1" / "19_ReLU", copy / "level1" / "19_ReLU",
                        std::filesystem::copy_options::recursive);
  std::filesystem::copy(copy / "level1" / "19_ReLU" / "correct", copy / "level1" / "19_ReLU" / "broken_stray",
                        std::filesystem::copy_options::recursive);
  write_text(copy / "manifest.tsv",
             "level1/19_ReLU\tbroken\theavy:66\trequired\toff-by-one\tnon_finite\tlast vector skipped\n");
  write_text(copy / "level1" / "19_ReLU" / "broken" / "kernels" / "relu.cu", "// nothing left of the kernel\n");
  // The stray variant also breaks the candidate contract: a constructor the task's Model does
  // not have, torch compute in forward, and a file the compile driver would not build.
  write_text(copy / "level1" / "19_ReLU" / "broken_stray" / "model_new.py",
             "import torch\nimport torch.nn as nn\n\nimport cuda_extension\n\n\nclass ModelNew(nn.Module):\n"
             "    def __init__(self, inplace=False):\n        super().__init__()\n\n"
             "    def forward(self, x):\n        return torch.relu(x)\n");
  write_text(copy / "level1" / "19_ReLU" / "broken_stray" / "kernels" / "notes.txt", "tuning notes\n");
  const auto rejected = run({CUDA_AGENT_PYTHON, (candidates_directory / "check_layout.py").string(), copy.string()});
  INFO(rejected.standard_output.text);
  CHECK(rejected.exit_code == 1);
  CHECK_THAT(rejected.standard_output.text, Catch::Matchers::Contains("a broken variant is a minimal change"));
  CHECK_THAT(rejected.standard_output.text,
             Catch::Matchers::Contains("level1/19_ReLU/broken_stray: not named in manifest.tsv"));
  CHECK_THAT(rejected.standard_output.text,
             Catch::Matchers::Contains("ModelNew.__init__(self, inplace=False) differs from the task's "
                                       "Model.__init__(self)"));
  CHECK_THAT(rejected.standard_output.text,
             Catch::Matchers::Contains("ModelNew.forward calls torch.relu; only cuda_extension functions may compute"));
  CHECK_THAT(rejected.standard_output.text,
             Catch::Matchers::Contains("kernels/notes.txt: only *.cu *.cuh *.cpp *.h files belong in kernels/"));

  // A manifest row that does not say what kind of bug its variant carries.
  write_text(copy / "manifest.tsv", "level1/19_ReLU\tbroken\theavy:66\trequired\t\tnon_finite\tlast vector skipped\n");
  const auto unnamed = run({CUDA_AGENT_PYTHON, (candidates_directory / "check_layout.py").string(), copy.string()});
  INFO(unnamed.standard_output.text);
  CHECK(unnamed.exit_code == 1);
  CHECK_THAT(unnamed.standard_output.text,
             Catch::Matchers::Contains("level1/19_ReLU/broken: name the bug kind and what the variant breaks"));
}

TEST_CASE("the CPU emulation matches the reference for correct kernels and rejects the broken ones", "[python]") {
  // The cheaper half of the tasks (each a few seconds); check_cpu_emulation.py without
  // arguments runs all of them.
  const auto emulated = run({CUDA_AGENT_PYTHON, (candidates_directory / "check_cpu_emulation.py").string(),
                             "level1/19_ReLU", "level1/24_LogSoftmax", "level1/47_Sum", "level1/1_Square",
                             "level1/41_Max", "level1/89_cumsum", "level2/40_Matmul", "level2/45_Gemm"},
                            ca::Environment::from_current({"PATH", "HOME", "LANG"}), std::chrono::minutes(14));
  INFO(emulated.standard_output.text);
  REQUIRE(emulated.succeeded());
  CHECK_THAT(emulated.standard_output.text,
             Catch::Matchers::Contains("8/8 tasks: correct emulation matches, broken emulation is rejected"));
  CHECK_THAT(emulated.standard_output.text,
             Catch::Matchers::Contains("shape mismatch: expected (1, 4, 65523), got (1, 4, 65524)"));
  CHECK_THAT(emulated.standard_output.text, Catch::Matchers::Contains("non-finite: 4 NaN"));
}

TEST_CASE("the CPU emulation of the remaining kernels matches the reference and rejects the broken ones",
          "[python][slow]") {
  // The other fifteen tasks (about four minutes on two loaded cores; 33_VanillaRNN alone builds
  // a 2 GiB weight): with the case above, every task.
  const auto emulated = run({CUDA_AGENT_PYTHON, (candidates_directory / "check_cpu_emulation.py").string(),
                             "level1/40_LayerNorm", "level1/95_Cross", "level2/25_Conv", "level2/30_Gemm",
                             "level2/57_Conv", "level2/67_Conv", "level2/71_Conv", "level2/76_Gemm", "level3/1_MLP",
                             "level3/2_Shallow", "level3/3_Deep", "level3/4_LeNet5", "level3/33_Vanilla",
                             "level3/50_ReLU", "level3/44_MiniGPT"},
                            ca::Environment::from_current({"PATH", "HOME", "LANG"}), std::chrono::minutes(14));
  INFO(emulated.standard_output.text);
  REQUIRE(emulated.succeeded());
  CHECK_THAT(emulated.standard_output.text,
             Catch::Matchers::Contains("15/15 tasks: correct emulation matches, broken emulation is rejected"));
  // The missing boundary check is emulated too: edge threads store over the next row's pixels.
  CHECK_THAT(emulated.standard_output.text, Catch::Matchers::Contains("broken_boundary: rejected: value mismatch"));
}

TEST_CASE("run_all.sh reports each verdict and fails exactly when a required expectation is broken", "[python]") {
  Scratch scratch;
  const std::filesystem::path binary = scratch.path() / "cuda-agent";
  write_text(binary, fake_cuda_agent);
  std::filesystem::permissions(binary, std::filesystem::perms::owner_all);
  const std::string script = (candidates_directory / "run_all.sh").string();
  auto environment = [](const std::string& accept, const std::string& crash) {
    return ca::Environment::from_current({"PATH", "HOME", "LANG"})
        .set("ACCEPT_VARIANTS", accept)
        .set("CRASH_VARIANTS", crash);
  };

  SECTION("every expectation met; an accepted race variant is only a warning") {
    const std::filesystem::path out = scratch.path() / "good";
    const auto ran = run({"/bin/bash", script, "-n", "-j", "2", "-o", out.string(), binary.string(), "level1/41_Max",
                          "level2/30_Gemm"},
                         environment("30_Gemm_GroupNorm_Hardtanh/broken_race", ""));
    INFO(ran.standard_output.text);
    CHECK(ran.exit_code == 0);
    // The table goes to the output directory too: for people and for scripts.
    const std::string markdown = read_text(out / "summary.md");
    CHECK_THAT(markdown, Catch::Matchers::Contains("| 41_Max_Pooling_1D | level1 | accepted | broken | off-by-one | "
                                                   "rejected: value_mismatch (output 0 differs at (0, 1): expected 0.5, "
                                                   "got 0.25) | warning |"));
    CHECK_THAT(markdown, Catch::Matchers::Contains("| 30_Gemm_GroupNorm_Hardtanh | level2 | accepted | broken_race | "
                                                   "race (missing barrier) | accepted | warning |"));
    const std::string table = read_text(out / "summary.tsv");
    CHECK_THAT(table, Catch::Matchers::Contains("30_Gemm_GroupNorm_Hardtanh\tlevel2\taccepted\t"));
    CHECK(std::count(table.begin(), table.end(), '\n') == 4);  // header + three broken variants
    CHECK_THAT(read_text(out / "summary.txt"),
               Catch::Matchers::Contains("2/2 correct candidates accepted, 2/2 required broken variants rejected"));
    // 41_Max_Pooling_1D is heavy: both of its evaluations took their GPU memory and gave it back.
    CHECK(read_text(out / ".gpu_memory_in_use") == "0\n");
    CHECK_THAT(ran.standard_output.text,
               Catch::Matchers::Contains("2/2 correct candidates accepted, 2/2 required broken variants rejected"));
    CHECK_THAT(ran.standard_output.text,
               Catch::Matchers::Contains("value_mismatch: output 0 differs at (0, 1): expected 0.5, got 0.25"));
    // Each progress line says why an evaluation was rejected, for a run cut short before its summary.
    CHECK_THAT(progress_line(ran.standard_output.text, "level1/41_Max_Pooling_1D", "broken"),
               Catch::Matchers::EndsWith("value_mismatch: output 0 differs at (0, 1): expected 0.5, got 0.25"));
    CHECK_THAT(progress_line(ran.standard_output.text, "level1/41_Max_Pooling_1D", "correct"),
               Catch::Matchers::EndsWith("s"));
    CHECK_THAT(ran.standard_output.text,
               Catch::Matchers::Contains("WARNING level2/30_Gemm_GroupNorm_Hardtanh/broken_race: accepted"));
    CHECK_THAT(ran.standard_output.text, Catch::Matchers::Contains("WARNING level1/41_Max_Pooling_1D/broken: rejected "
                                                                   "as value_mismatch, expected shape_mismatch"));
  }

  SECTION("an accepted broken variant and a missing result fail the run") {
    const std::filesystem::path out = scratch.path() / "bad";
    const auto ran = run({"/bin/bash", script, "-n", "-o", out.string(), binary.string(), "level3/1_MLP",
                          "level3/4_LeNet5"},
                         environment("1_MLP/broken", "4_LeNet5/correct"));
    INFO(ran.standard_output.text);
    CHECK(ran.exit_code == 1);
    CHECK_THAT(read_text(out / "summary.md"), Catch::Matchers::Contains("| 1_MLP | level3 | accepted | broken | "
                                                                        "off-by-one (layer loop) | accepted | FAIL |"));
    CHECK_THAT(ran.standard_output.text, Catch::Matchers::Contains("FAIL level3/1_MLP/broken: accepted although"));
    CHECK_THAT(ran.standard_output.text,
               Catch::Matchers::Contains("FAIL level3/4_LeNet5/correct: no_result: no JSON result (exit status 3)"));
    CHECK_THAT(progress_line(ran.standard_output.text, "level3/4_LeNet5", "correct"),
               Catch::Matchers::EndsWith("(no JSON result)"));
  }

  // On a GPU machine the host checks pass and the stand-in would evaluate everything.
  if (!std::filesystem::exists("/dev/nvidia0")) {
    SECTION("without a GPU the run stops before evaluating anything and says why") {
      const auto ran = run({"/bin/bash", script, "-o", (scratch.path() / "no-gpu").string(), binary.string()},
                           environment("", ""));
      CHECK(ran.exit_code == 2);
      CHECK_THAT(ran.standard_output.text, Catch::Matchers::Contains("no NVIDIA GPU here"));
      CHECK_FALSE(std::filesystem::exists(scratch.path() / "no-gpu" / "evaluated.txt"));
    }
  }

  SECTION("a path that is not an executable is refused before anything runs") {
    const auto ran = run({"/bin/bash", script, (scratch.path() / "missing").string()}, environment("", ""));
    CHECK(ran.exit_code == 2);
    CHECK_THAT(ran.standard_output.text, Catch::Matchers::Contains("is not an executable cuda-agent binary"));
  }
}
