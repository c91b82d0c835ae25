// SPDX-License-Identifier: Apache-2.0
#include "adversarial/adversarial_suite.hpp"

#include <algorithm>   // any_of, find
#include <cstdlib>     // getenv
#include <filesystem>  // path, exists
#include <iostream>    // cout
#include <map>         // map
#include <string>      // string
#include <utility>     // make_pair
#include <vector>      // vector

#include <unistd.h>  // geteuid

namespace ca = cuda_agent;

TEST_CASE("adversarial suite on the CPU: every exploit is rejected with the right reason", "[python][adversarial]") {
  ca::testing::run_suite("cpu", false,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cpu-reject.json");
}

TEST_CASE("adversarial suite on the CPU: legitimate tricky candidates are accepted", "[python][adversarial]") {
  ca::testing::run_suite("cpu", true, std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cpu-accept.json");
}

TEST_CASE("adversarial suite on the GPU: every exploit is rejected with the right reason", "[gpu][adversarial]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::run_suite("cuda", false,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cuda-reject.json");
}

TEST_CASE("adversarial suite on the GPU: legitimate tricky candidates are accepted", "[gpu][adversarial]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::run_suite("cuda", true,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cuda-accept.json");
}

TEST_CASE("adversarial suite on the CPU: timing exploits are rejected by the trusted evaluation",
          "[python][adversarial]") {
  ca::testing::run_suite("cpu", false,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cpu-timed-reject.json", true);
}

TEST_CASE("adversarial suite on the CPU: legitimate candidates are timed and accepted", "[python][adversarial]") {
  ca::testing::run_suite("cpu", true,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cpu-timed-accept.json", true);
}

TEST_CASE("adversarial suite on the GPU: timing exploits are rejected by the trusted evaluation",
          "[gpu][adversarial]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::run_suite("cuda", false,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cuda-timed-reject.json", true);
}

TEST_CASE("adversarial suite on the GPU: legitimate candidates are timed and accepted", "[gpu][adversarial]") {
  if (!ca::testing::gpu_available()) CUDA_AGENT_SKIP("no NVIDIA GPU on this machine");
  ca::testing::run_suite("cuda", true,
                         std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "adversarial" / "cuda-timed-accept.json", true);
}

TEST_CASE("the suite's tasks reject null models (task audit)", "[python][adversarial]") {
  // Tasks whose own inputs let a null model pass, on purpose (the exploits of too regular
  // inputs); the audit's stress inputs must rescue them.
  const std::vector<std::string> regular{"relu_rand.py", "row_mean_rand.py"};
  // Tasks whose reference normalizes: a flat set (a sample and a channel of zeros) comes last.
  const std::vector<std::string> normalizing{"layer_norm.py", "layer_norm_long_rows.py", "softmax_rows.py",
                                             "batch_norm_small.py"};
  // Tasks with integers among their inputs: sets of their own come last (the integer
  // exponent shifted by one; the cross entropy's targets holding its ignore_index in one
  // element in 16, then in all but two, twice).
  const nlohmann::json ignored_targets = nlohmann::json::parse(R"([{"kind": "integer_sentinels", "value": -100},
      {"kind": "integer_sentinels", "value": -100, "dense": true},
      {"kind": "integer_sentinels", "value": -100, "dense": true}])");
  const std::map<std::string, nlohmann::json> integer_sets{
      {"pow_int.py", nlohmann::json::array({{{"kind", "shifted_integers"}}})},
      {"cross_entropy_rows.py", ignored_targets},
      {"cross_entropy_mean.py", ignored_targets}};
  // Tasks whose reference leaves its domain on the full heavy tail: a milder one instead.
  const std::vector<std::string> mild_tails{"exp_row_mean.py"};
  ca::HarnessVerifier verifier{ca::testing::harness_options("cpu")};
  for (const auto& entry :
       std::filesystem::directory_iterator(ca::testing::adversarial_directory() / "tasks" / "cpu")) {
    const ca::Task task = ca::testing::task_from_file(entry.path());
    const nlohmann::json audit = verifier.audit(task);
    INFO(entry.path().filename() << ": " << audit.dump(2));
    CHECK(audit["unfit"] == false);
    const bool expected_regular =
        std::find(regular.begin(), regular.end(), entry.path().filename().string()) != regular.end();
    CHECK(audit["degenerate"] == expected_regular);
    // Heavy tails on every task (statistics from a sample of the elements pass any task on
    // identically distributed inputs); the regular ones need more. Then two sparse sets of the
    // first distribution kept (the task's own inputs with one of its elements each).
    CHECK(!audit["stress"].empty());
    nlohmann::json stress = audit["stress"];
    const bool expected_flat =
        std::find(normalizing.begin(), normalizing.end(), entry.path().filename().string()) != normalizing.end();
    CHECK((!stress.empty() && stress.back() == nlohmann::json({{"kind", "flat"}})) == expected_flat);
    if (expected_flat && !stress.empty()) stress.erase(stress.size() - 1);
    if (const auto integers = integer_sets.find(entry.path().filename().string()); integers != integer_sets.end()) {
      const std::size_t tail = integers->second.size();
      REQUIRE(stress.size() >= tail);
      CHECK(nlohmann::json(std::vector<nlohmann::json>(stress.end() - static_cast<std::ptrdiff_t>(tail),
                                                       stress.end())) == integers->second);
      stress = std::vector<nlohmann::json>(stress.begin(), stress.end() - static_cast<std::ptrdiff_t>(tail));
    }
    nlohmann::json heavy_tailed = {{"kind", "heavy_tailed"}, {"positive", false}};
    if (std::find(mild_tails.begin(), mild_tails.end(), entry.path().filename().string()) != mild_tails.end())
      heavy_tailed = {{"kind", "heavy_tailed"}, {"positive", false}, {"spike", 8.0}};
    if (!expected_regular)
      CHECK(stress == nlohmann::json::array({heavy_tailed,
                                             {{"kind", "sparse"}, {"stress", heavy_tailed}},
                                             {{"kind", "sparse"}, {"stress", heavy_tailed}}}));
    else
      CHECK(stress.back() == nlohmann::json({{"kind", "sparse"}, {"stress", stress[0]}}));
  }
}

TEST_CASE("the manifest covers at least 25 exploits of the catalog and 10 legitimate candidates on each device",
          "[adversarial]") {
  const nlohmann::json manifest = ca::testing::load_manifest();
  for (const std::string device : {"cpu", "cuda"}) {
    int rejected = 0;
    int accepted = 0;
    for (const nlohmann::json& entry : manifest["candidates"]) {
      if (!entry.contains(device)) continue;
      const bool correct = entry[device]["expect"] == "correct";
      (correct ? accepted : rejected) += 1;
      CHECK(std::filesystem::exists(ca::testing::adversarial_directory() / "candidates" /
                                    entry.value("source", entry["name"].get<std::string>()) / "model_new.py"));
      if (!correct) {
        for (const std::string reason : entry[device]["expect"]) CHECK(ca::parse_rejection_reason(reason).has_value());
      }
    }
    INFO(device);
    CHECK(rejected >= 25);
    CHECK(accepted >= 10);
  }
}

// The CUDA forms run only on a GPU machine, but they must compile wherever nvcc exists:
// a build error would otherwise show up first as a misplaced verdict there.
TEST_CASE("the suite's CUDA forms build with nvcc (no GPU needed: an explicit architecture)",
          "[python][adversarial][slow]") {
  const char* cuda_home = std::getenv("CUDA_HOME");
  const std::filesystem::path nvcc =
      std::filesystem::path(cuda_home && *cuda_home ? cuda_home : "/usr/local/cuda") / "bin" / "nvcc";
  if (!std::filesystem::exists(nvcc))
    CUDA_AGENT_SKIP("no CUDA toolkit at " + nvcc.parent_path().parent_path().string());
  ca::testing::ScratchDirectory scratch("adversarial-nvcc");
  ca::SandboxOptions sandbox;
  sandbox.workspace = scratch.path();
  ca::CompileOptions options;
  options.device = "cuda";
  options.gpu_architecture = "sm_90a";  // the H200's
  options.python = CUDA_AGENT_PYTHON;
  options.cache_directory = ca::testing::compile_cache_directory();
  if (::geteuid() == 0) options.sandbox_user = ca::UserIdentity{65534, 65534};
  ca::CompileDriver<ca::ProcessSandbox> driver(ca::ProcessSandbox(sandbox), options);

  // The shared toolbox (every candidate without its own kernels), then each candidate's own.
  std::vector<nlohmann::json> entries = {nlohmann::json{{"name", "correct_relu"}}};
  const nlohmann::json manifest = ca::testing::load_manifest();
  for (const nlohmann::json& entry : manifest["candidates"])
    if (std::filesystem::exists(ca::testing::adversarial_directory() / "candidates" / entry["name"].get<std::string>() /
                                "kernels.cuda"))
      entries.push_back(entry);
  REQUIRE(entries.size() > 1);
  int built_count = 0;
  for (const nlohmann::json& entry : entries) {
    const std::string name = entry["name"];
    const std::filesystem::path directory = scratch.path() / name;
    ca::testing::assemble_suite_candidate(entry, "cuda", directory / "candidate");
    ca::detail::make_open_directory(directory / "build");
    const ca::CompileResult built = driver.build(directory / "candidate", directory / "build");
    std::cout << "  " << name << ": " << (built.succeeded ? "built" : "not built") << " in "
              << static_cast<double>(built.duration.count()) / 1000.0 << " s" << std::endl;
    INFO(name << ":\n" << built.log.substr(0, 6000));
    if (built.succeeded) {
      CHECK(std::filesystem::exists(built.module_path));
      ++built_count;
      continue;
    }
    // Refused by the library policy at link time is a verdict, not a build error.
    const bool refused_by_policy =
        std::any_of(built.diagnostics.begin(), built.diagnostics.end(),
                    [](const ca::Diagnostic& d) { return d.message.rfind("the extension ", 0) == 0; });
    CHECK(refused_by_policy);
  }
  CHECK(built_count >= 1);
}
